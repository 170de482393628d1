#!/usr/bin/env python3
"""Renders one container of examples/daemonset.yaml as a `docker run`.

    daemonset-pod.py YAML CONTAINER IMAGE NETNS WORK [KEY=VALUE...]

prints, NUL-separated, the arguments for `docker run` that give CONTAINER
(an init container or a container of the DaemonSet's pod) what kubelet
would: its securityContext (capabilities dropped and added,
allowPrivilegeEscalation false as no-new-privileges, a read-only root; a
RuntimeDefault seccomp profile is docker's default one), its environment
(`env` values and the ConfigMaps of `envFrom`, then the KEY=VALUEs given,
which stand for an edited ConfigMap), its command, and its volumes:

  hostPath   under WORK/host, the fake node's root file system, with
             kubelet's type checks (Directory must exist; DirectoryOrCreate
             and FileOrCreate create it there, as kubelet does on a node)
  configMap  WORK/volume-NAME, one file per key
  emptyDir   WORK/volume-NAME (shared by the pod's containers, as one is)

NETNS is the container whose network namespace plays the node's
(hostNetwork: --network container:NETNS). IMAGE replaces the manifest's
image (a placeholder pinned by digest). Needs PyYAML.
"""

import os
import sys

import yaml


def main(argv):
    if len(argv) < 6:
        raise SystemExit(__doc__)
    path, name, image, netns, work = argv[1:6]
    overrides = dict(kv.split("=", 1) for kv in argv[6:])
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    container = next(c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == name)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    assert pod.get("hostNetwork") is True, "the pod must use the host's network"

    args = ["--network", f"container:{netns}", "--label", "iptables-wrapper-test=" + os.environ.get("IPTW_RUN_ID", "manual")]
    sc = container.get("securityContext") or {}
    seccomp = (sc.get("seccompProfile") or (pod.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    if seccomp != "RuntimeDefault":
        raise SystemExit(f"daemonset-pod.py: {name}: seccomp {seccomp!r} is not rendered (only RuntimeDefault)")
    caps = sc.get("capabilities") or {}
    for cap in caps.get("drop", []):
        args += ["--cap-drop", cap]
    for cap in caps.get("add", []):
        args += ["--cap-add", cap]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if sc.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    if sc.get("privileged"):
        raise SystemExit(f"daemonset-pod.py: {name}: privileged is not rendered")

    env = {}
    for source in container.get("envFrom", []):
        env.update(configmaps[source["configMapRef"]["name"]])
    for e in container.get("env", []):
        env[e["name"]] = e["value"]
    env.update(overrides)
    for key, value in env.items():
        args += ["--env", f"{key}={value}"]

    host = os.path.join(work, "host")
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            hp = volume["hostPath"]
            source = os.path.join(host, hp["path"].lstrip("/"))
            kind = hp.get("type", "")
            if kind == "DirectoryOrCreate":
                os.makedirs(source, mode=0o755, exist_ok=True)
            elif kind == "FileOrCreate":
                os.makedirs(os.path.dirname(source), exist_ok=True)
                if not os.path.exists(source):
                    open(source, "a").close()
                    os.chmod(source, 0o644)
            elif kind == "Directory":
                if not os.path.isdir(source):
                    raise SystemExit(f"daemonset-pod.py: hostPath {hp['path']} (Directory) does not exist on the node: the pod would not start")
            else:
                raise SystemExit(f"daemonset-pod.py: hostPath type {kind!r} is not rendered")
        elif "configMap" in volume:
            source = os.path.join(work, "volume-" + mount["name"])
            os.makedirs(source, exist_ok=True)
            for key, value in configmaps[volume["configMap"]["name"]].items():
                with open(os.path.join(source, key), "w") as f:
                    f.write(str(value))
        elif "emptyDir" in volume:
            source = os.path.join(work, "volume-" + mount["name"])
            os.makedirs(source, exist_ok=True)
            os.chmod(source, 0o777)
        else:
            raise SystemExit(f"daemonset-pod.py: volume {mount['name']} of its kind is not rendered")
        options = "ro" if mount.get("readOnly") else "rw"
        args += ["--volume", f"{source}:{mount['mountPath']}:{options}"]

    command = container.get("command", []) + container.get("args", [])
    args += ["--entrypoint", command[0], image] + command[1:]
    sys.stdout.write("\0".join(args) + "\0")


if __name__ == "__main__":
    main(sys.argv)
