#!/usr/bin/env python3
"""Checks examples/daemonset.yaml against what docs/kubernetes.md promises.

    check-daemonset.py [FILE]          the properties below; one line per failure
    check-daemonset.py --self-test     each property, broken on purpose in a copy
                                       of the example, must be caught

The Kubernetes schemas are checked by kubernetes-validate
(scripts/check-daemonset.sh); this checks what a schema cannot: the choices
modelled on kube-proxy's, Calico's and node-exporter's DaemonSets (Linux
nodes only, the host's network, no service account token, RuntimeDefault
seccomp, capabilities dropped and only the needed ones added, requests,
an image pinned by digest), the host mounts (the host's root read-only with
HostToContainer propagation, the xtables lock as kube-proxy mounts it,
nothing created on the host outside /run but the backup directory), and the
init step that must never hold the pod back (removal off by default, exit 0
always). Needs PyYAML.
"""

import copy
import sys

import yaml

ROOT_MOUNT = "/host"
NEEDED = {"NET_ADMIN", "NET_RAW"}
# The removal proves its backup by restoring it into a scratch network
# namespace it makes with unshare(CLONE_NEWNET): that container only.
REMOVAL_EXTRA = {"SYS_ADMIN"}
BACKUP_MOUNT = "/stale-backups"
CREATING_TYPES = {"", "DirectoryOrCreate", "FileOrCreate"}


def load(text):
    docs = [d for d in yaml.safe_load_all(text) if d]
    daemonsets = [d for d in docs if d.get("kind") == "DaemonSet"]
    if len(daemonsets) != 1:
        raise SystemExit(f"check-daemonset: expected one DaemonSet, found {len(daemonsets)}")
    return docs


def check(docs):
    """Returns the list of failures (empty: all hold)."""
    failures = []

    def need(ok, message):
        if not ok:
            failures.append(message)

    daemonset = next(d for d in docs if d.get("kind") == "DaemonSet")
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d.get("kind") == "ConfigMap"}
    pod = daemonset["spec"]["template"]["spec"]
    inits = pod.get("initContainers", [])
    containers = pod.get("containers", [])
    every = inits + containers

    need((pod.get("nodeSelector") or {}).get("kubernetes.io/os") == "linux",
         "the pod needs nodeSelector kubernetes.io/os: linux (the wrapper is a Linux binary)")
    need(pod.get("hostNetwork") is True, "the pod needs hostNetwork: true (the kernel evidence must be the host's)")
    need(pod.get("automountServiceAccountToken") is False,
         "the pod needs automountServiceAccountToken: false (nothing in it talks to the API server)")
    pod_seccomp = ((pod.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    for c in every:
        name = c["name"]
        sc = c.get("securityContext") or {}
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        need(seccomp == "RuntimeDefault", f"{name}: seccompProfile must be RuntimeDefault (found {seccomp!r})")
        need(not sc.get("privileged"), f"{name}: must not be privileged")
        need(sc.get("allowPrivilegeEscalation") is False, f"{name}: needs allowPrivilegeEscalation: false")
        need(sc.get("readOnlyRootFilesystem") is True, f"{name}: needs readOnlyRootFilesystem: true")
        caps = sc.get("capabilities") or {}
        need(caps.get("drop") == ["ALL"], f"{name}: capabilities must drop [ALL] (found {caps.get('drop')!r})")
        added = set(caps.get("add") or [])
        removes = is_stale_step(c)
        allowed = NEEDED | (REMOVAL_EXTRA if removes else set())
        need(NEEDED <= added, f"{name}: must add NET_ADMIN and NET_RAW (found {sorted(added)})")
        need(added <= allowed, f"{name}: adds more than it needs: {sorted(added - allowed)}")
        requests = (c.get("resources") or {}).get("requests") or {}
        need("cpu" in requests and "memory" in requests, f"{name}: needs resource requests for cpu and memory")
        image = c.get("image", "")
        need("@sha256:" in image, f"{name}: the image must be pinned by digest (image: REPO@sha256:...), found {image!r}")
    need(len({c.get("image") for c in every}) == 1, "every container must run the same image")

    # Host mounts.
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    host_paths = {n: v["hostPath"] for n, v in volumes.items() if "hostPath" in v}
    backup_volumes = {m["name"] for c in inits if is_stale_step(c)
                      for m in c.get("volumeMounts", []) if m["mountPath"] == BACKUP_MOUNT}
    for name, hp in host_paths.items():
        path, kind = hp["path"], hp.get("type", "")
        if kind in CREATING_TYPES and name not in backup_volumes:
            need(path == "/run" or path.startswith("/run/"),
                 f"volume {name}: hostPath {path} of type {kind or 'unset'} can create it on the host; "
                 "only paths under /run (and the backup directory) may be created")
    roots = [n for n, hp in host_paths.items() if hp["path"] == "/"]
    need(len(roots) == 1 and host_paths[roots[0]].get("type") == "Directory" if roots else False,
         "the host's root needs one hostPath volume, path: /, type: Directory")
    locks = [n for n, hp in host_paths.items() if hp["path"] == "/run/xtables.lock"]
    need(len(locks) == 1 and host_paths[locks[0]].get("type") == "FileOrCreate" if locks else False,
         "/run/xtables.lock needs one hostPath volume of type FileOrCreate (as kube-proxy mounts it)")
    for c in every:
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        root = mounts.get(ROOT_MOUNT)
        need(root is not None and root["name"] in roots and root.get("readOnly") is True
             and root.get("mountPropagation") == "HostToContainer",
             f"{c['name']}: needs the host's root at {ROOT_MOUNT}, readOnly, mountPropagation HostToContainer")
        lock = mounts.get("/run/xtables.lock")
        need(lock is not None and lock["name"] in locks and not lock.get("readOnly"),
             f"{c['name']}: needs the host's /run/xtables.lock, writable, at /run/xtables.lock")
        for m in c.get("volumeMounts", []):
            if m["name"] in host_paths and m["name"] not in roots + locks and not m.get("readOnly"):
                need(m["name"] in backup_volumes or c["name"] == "metrics",
                     f"{c['name']}: writes into the host's {host_paths[m['name']]['path']}")

    # The stale-rules step: present, off by default, never failing.
    steps = [c for c in inits if is_stale_step(c)]
    need(len(steps) == 1, "one init container must run iptables-wrapper stale")
    for c in steps:
        script = shell_script(c)
        need(script is not None, f"{c['name']}: must run a shell script (sh -c), which can ignore the exit status")
        if script is None:
            continue
        lines = [l.strip() for l in script.strip().splitlines() if l.strip()]
        need(lines[-1] == "exit 0", f"{c['name']}: its script must end with 'exit 0' (found {lines[-1]!r})")
        need("set -e" not in script, f"{c['name']}: 'set -e' would end the script on the report's exit status")
        need('"${REMOVE_STALE:-false}" = true' in script,
             f"{c['name']}: removal must run only when REMOVE_STALE is exactly true")
        need("--backup-dir" in script and BACKUP_MOUNT in script, f"{c['name']}: the removal must back up into {BACKUP_MOUNT}")
        need("KEEP_BACKUPS" in script and "rm -rf" in script, f"{c['name']}: old backups must be pruned (KEEP_BACKUPS)")
        sources = [e["configMapRef"]["name"] for e in c.get("envFrom", []) if "configMapRef" in e]
        data = {}
        for s in sources:
            data.update(configmaps.get(s, {}))
        need(any(s in configmaps for s in sources), f"{c['name']}: needs the ConfigMap that holds REMOVE_STALE (envFrom)")
        need(str(data.get("REMOVE_STALE", "false")) == "false", "REMOVE_STALE must be \"false\" by default")
    for c in containers:
        script = shell_script(c) or ""
        if "--format prometheus" in script:
            need('mv -f "$out.tmp" "$out"' in script, f"{c['name']}: must write the metrics file atomically (tmp, then rename)")
    return failures


def is_stale_step(container):
    return "iptables-wrapper stale" in " ".join(container.get("command", []) + container.get("args", []))


def shell_script(container):
    command = container.get("command", [])
    if len(command) == 3 and command[0] in ("/bin/sh", "sh") and command[1] == "-c":
        return command[2]
    return None


def self_test(docs):
    """Every property, broken in a copy: each must be reported."""

    def pod(d):
        return next(x for x in d if x.get("kind") == "DaemonSet")["spec"]["template"]["spec"]

    def first(d, key="containers"):
        return pod(d)[key][0]

    def drop_exit(d):
        c = first(d, "initContainers")
        c["command"][2] = c["command"][2].replace("exit 0", "")

    mutations = {
        "no nodeSelector": lambda d: pod(d).pop("nodeSelector"),
        "no hostNetwork": lambda d: pod(d).pop("hostNetwork"),
        "token mounted": lambda d: pod(d).pop("automountServiceAccountToken"),
        "no seccomp": lambda d: pod(d).pop("securityContext"),
        "no drop ALL": lambda d: first(d)["securityContext"]["capabilities"].pop("drop"),
        "SYS_ADMIN in the main container": lambda d: first(d)["securityContext"]["capabilities"]["add"].append("SYS_ADMIN"),
        "no requests": lambda d: first(d).pop("resources"),
        "image by tag": lambda d: first(d).__setitem__("image", "your-image-with-iptables-wrapper:latest"),
        "privileged": lambda d: first(d)["securityContext"].__setitem__("privileged", True),
        "alternatives DirectoryOrCreate (the old example)": lambda d: pod(d)["volumes"].append(
            {"name": "host-alternatives", "hostPath": {"path": "/etc/alternatives", "type": "DirectoryOrCreate"}}),
        "host root not read-only": lambda d: next(m for m in first(d)["volumeMounts"] if m["mountPath"] == ROOT_MOUNT).pop("readOnly"),
        "host root without propagation": lambda d: next(m for m in first(d)["volumeMounts"] if m["mountPath"] == ROOT_MOUNT).pop("mountPropagation"),
        "lock not FileOrCreate": lambda d: next(v for v in pod(d)["volumes"] if v["name"] == "xtables-lock")["hostPath"].pop("type"),
        "init step may fail": drop_exit,
        "removal on by default": lambda d: next(x for x in d if x.get("kind") == "ConfigMap" and "REMOVE_STALE" in x.get("data", {}))["data"].__setitem__("REMOVE_STALE", "true"),
        "init step without a shell": lambda d: first(d, "initContainers").__setitem__("command", ["iptables-wrapper", "stale", "--remove"]),
    }
    missed = []
    for name, mutate in mutations.items():
        broken = copy.deepcopy(docs)
        mutate(broken)
        if not check(broken):
            missed.append(name)
    base = check(docs)
    if base:
        print("check-daemonset: the example itself fails, so the self-test means nothing:", *base, sep="\n  ")
        return 1
    if missed:
        print("check-daemonset: the self-test's broken copies passed: " + ", ".join(missed))
        return 1
    print(f"check-daemonset: self-test: all {len(mutations)} broken copies caught")
    return 0


def main(argv):
    if argv[1:2] == ["--self-test"]:
        path = argv[2] if len(argv) > 2 else "examples/daemonset.yaml"
        with open(path) as f:
            return self_test(load(f.read()))
    path = argv[1] if len(argv) > 1 else "examples/daemonset.yaml"
    with open(path) as f:
        failures = check(load(f.read()))
    for failure in failures:
        print(f"check-daemonset: {path}: {failure}")
    if not failures:
        print(f"check-daemonset: {path}: every property holds")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
