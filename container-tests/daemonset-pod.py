#!/usr/bin/env python3
"""Renders one container of examples/daemonset.yaml as a `docker run`.

    daemonset-pod.py YAML CONTAINER IMAGE NETNS WORK [KEY=VALUE | settings:KEY=VALUE ...]
    daemonset-pod.py --probe YAML CONTAINER

prints, NUL-separated, the arguments for `docker run` that give CONTAINER
(an init container or a container of the DaemonSet's pod) what kubelet
would: its securityContext (capabilities dropped and added,
allowPrivilegeEscalation false as no-new-privileges, a read-only root; a
RuntimeDefault seccomp profile is docker's default one), its environment
(`env` values and the ConfigMaps of `envFrom`, then the KEY=VALUEs given,
which stand for a new version of a ConfigMap), its command with kubelet's
$(NAME) expansion of that environment, and its volumes:

  hostPath   under WORK/host, the fake node's root file system, with
             kubelet's type checks (Directory must exist; DirectoryOrCreate
             and FileOrCreate create it there, as kubelet does on a node)
  configMap  WORK/volume-NAME, one file per key
  emptyDir   WORK/volume-NAME (shared by the pod's containers, as one is)

each mounted exactly as the manifest writes it: readOnly, and
mountPropagation as docker's rslave (HostToContainer) or rshared
(Bidirectional), so that a runtime that refuses it refuses it here; a mount
field it cannot render stops it. settings:KEY=VALUE writes KEY into the
configMap volume mounted at /etc/iptables-wrapper (KEY= with no value
removes it): a new version of the settings. With --probe it prints the
container's readinessProbe exec command instead, to run in the container
as kubelet does (ready when it exits 0).
NETNS is the container whose network namespace plays the node's
(hostNetwork: --network container:NETNS). IMAGE replaces the manifest's
image (a placeholder pinned by digest). Needs PyYAML.
"""

import os
import sys

import yaml


SETTINGS_MOUNT = "/etc/iptables-wrapper"
PROPAGATION = {"None": None, "HostToContainer": "rslave", "Bidirectional": "rshared"}
MOUNT_FIELDS = {"name", "mountPath", "readOnly", "mountPropagation"}


def expand(text, env):
    """kubelet's expansion of $(NAME) in a command: $$ is a $, an unknown NAME stays as written."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            end = text.index(")", i)
            name = text[i + 2:end]
            out.append(env[name] if name in env else text[i:end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def load(path, name):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    container = next(c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == name)
    return configmaps, pod, container


def main(argv):
    if argv[1:2] == ["--probe"] and len(argv) == 4:
        _, _, container = load(argv[2], argv[3])
        command = ((container.get("readinessProbe") or {}).get("exec") or {}).get("command")
        if not command:
            raise SystemExit(f"daemonset-pod.py: {argv[3]} has no readinessProbe exec command")
        sys.stdout.write("\0".join(command) + "\0")
        return
    if len(argv) < 6:
        raise SystemExit(__doc__)
    path, name, image, netns, work = argv[1:6]
    overrides = dict(kv.split("=", 1) for kv in argv[6:] if not kv.startswith("settings:"))
    settings = dict(kv[len("settings:"):].split("=", 1) for kv in argv[6:] if kv.startswith("settings:"))
    configmaps, pod, container = load(path, name)
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
        unknown = set(mount) - MOUNT_FIELDS
        if unknown:
            raise SystemExit(f"daemonset-pod.py: {name}: mount {mount['name']}: {sorted(unknown)} not rendered")
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
            data = dict(configmaps[volume["configMap"]["name"]])
            if mount["mountPath"] == SETTINGS_MOUNT:
                data.update(settings)
            for key in os.listdir(source):
                os.remove(os.path.join(source, key))
            for key, value in data.items():
                if value != "" or key not in settings:
                    with open(os.path.join(source, key), "w") as f:
                        f.write(str(value))
        elif "emptyDir" in volume:
            source = os.path.join(work, "volume-" + mount["name"])
            os.makedirs(source, exist_ok=True)
            os.chmod(source, 0o777)
        else:
            raise SystemExit(f"daemonset-pod.py: volume {mount['name']} of its kind is not rendered")
        options = ["ro" if mount.get("readOnly") else "rw"]
        propagation = mount.get("mountPropagation", "None")
        if propagation not in PROPAGATION:
            raise SystemExit(f"daemonset-pod.py: {name}: mountPropagation {propagation!r} is not one of {sorted(PROPAGATION)}")
        if PROPAGATION[propagation]:
            options.append(PROPAGATION[propagation])
        args += ["--volume", f"{source}:{mount['mountPath']}:{','.join(options)}"]

    command = [expand(part, env) for part in container.get("command", []) + container.get("args", [])]
    args += ["--entrypoint", command[0], image] + command[1:]
    sys.stdout.write("\0".join(args) + "\0")


if __name__ == "__main__":
    main(sys.argv)
