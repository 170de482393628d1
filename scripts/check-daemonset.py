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
an image pinned by digest), no shell anywhere (every container and probe
runs the wrapper itself), settings that change only through a rollout
(immutable, versioned ConfigMaps; a readinessProbe that makes a wrapped
call; minReadySeconds and maxUnavailable 1), the host mounts (the host's
root read-only and without mount propagation, the xtables lock as
kube-proxy mounts it, nothing created on the host outside /run but the
backup directory), and the init step that must never hold the pod back
(removal off by default, --exit-zero). Needs PyYAML.
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
WRAPPER = "/usr/sbin/iptables-wrapper"
WRAPPED = {"iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore"}
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
    for c in every:
        command = c.get("command", [])
        need(command[:1] == [WRAPPER], f"{c['name']}: must run {WRAPPER} itself (no shell: distroless has none), found {command[:1]!r}")

    # Settings change only through a rollout, which waits on each node.
    for d in docs:
        if d.get("kind") == "ConfigMap":
            name = d["metadata"]["name"]
            need(d.get("immutable") is True, f"ConfigMap {name}: needs immutable: true (an edit would reach every pod at once)")
            need(name.rsplit("-", 1)[-1].isdigit(), f"ConfigMap {name}: needs a version at the end of its name (-1, -2, ...)")
    spec = daemonset["spec"]
    need(((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("maxUnavailable") == 1,
         "updateStrategy needs rollingUpdate.maxUnavailable: 1 (one node at a time)")
    need((spec.get("minReadySeconds") or 0) >= 10, "needs minReadySeconds of 10 or more (a new pod proves itself before the next node)")
    probes = [(c["name"], ((c.get("readinessProbe") or {}).get("exec") or {}).get("command", [])) for c in containers]
    need(all(p[:1] == [WRAPPER] and len(p) > 1 and p[1] in WRAPPED for _, p in probes) and probes,
         f"every container needs a readinessProbe exec of a wrapped call ({WRAPPER} iptables --version)")

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
             and "mountPropagation" not in root,
             f"{c['name']}: needs the host's root at {ROOT_MOUNT}, readOnly, without mountPropagation (refused where / is private)")
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
        command = c.get("command", [])
        need("--exit-zero" in command, f"{c['name']}: needs --exit-zero (an init container that fails holds the pod back)")
        need("--remove=$(REMOVE_STALE)" in command, f"{c['name']}: removal must follow REMOVE_STALE (--remove=$(REMOVE_STALE))")
        need(command[command.index("--backups-in") + 1:][:1] == [BACKUP_MOUNT] if "--backups-in" in command else False,
             f"{c['name']}: the backups must go into --backups-in {BACKUP_MOUNT}")
        need("--keep-backups" in command and "$(KEEP_BACKUPS)" in command, f"{c['name']}: old backups must be pruned (--keep-backups $(KEEP_BACKUPS))")
        sources = [e["configMapRef"]["name"] for e in c.get("envFrom", []) if "configMapRef" in e]
        data = {}
        for s in sources:
            data.update(configmaps.get(s, {}))
        need(any(s in configmaps for s in sources), f"{c['name']}: needs the ConfigMap that holds REMOVE_STALE (envFrom)")
        need(str(data.get("REMOVE_STALE", "false")) == "false", "REMOVE_STALE must be \"false\" by default")
    writers = [c for c in containers if c.get("command", [])[1:3] == ["metrics", "--textfile"]]
    need(len(writers) == 1, "one container must run iptables-wrapper metrics --textfile")
    return failures


def is_stale_step(container):
    return container.get("command", [])[1:2] == ["stale"]


def self_test(docs):
    """Every property, broken in a copy: each must be reported."""

    def pod(d):
        return next(x for x in d if x.get("kind") == "DaemonSet")["spec"]["template"]["spec"]

    def first(d, key="containers"):
        return pod(d)[key][0]

    def drop_exit(d):
        first(d, "initContainers")["command"].remove("--exit-zero")

    def configmap(d):
        return next(x for x in d if x.get("kind") == "ConfigMap")

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
        "host root with propagation (the old example)": lambda d: next(m for m in first(d)["volumeMounts"] if m["mountPath"] == ROOT_MOUNT).__setitem__("mountPropagation", "HostToContainer"),
        "a shell (the old example)": lambda d: first(d).__setitem__("command", ["/bin/sh", "-c", "iptables-wrapper metrics --textfile /textfile/x.prom"]),
        "settings ConfigMap editable (the old example)": lambda d: configmap(d).pop("immutable"),
        "settings ConfigMap unversioned": lambda d: configmap(d)["metadata"].__setitem__("name", "iptables-wrapper-settings"),
        "no readinessProbe (the old example)": lambda d: first(d).pop("readinessProbe"),
        "no minReadySeconds": lambda d: next(x for x in d if x.get("kind") == "DaemonSet")["spec"].pop("minReadySeconds"),
        "no textfile writer": lambda d: first(d).__setitem__("command", [WRAPPER, "detect"]),
        "lock not FileOrCreate": lambda d: next(v for v in pod(d)["volumes"] if v["name"] == "xtables-lock")["hostPath"].pop("type"),
        "init step may fail": drop_exit,
        "removal on by default": lambda d: next(x for x in d if x.get("kind") == "ConfigMap" and "REMOVE_STALE" in x.get("data", {}))["data"].__setitem__("REMOVE_STALE", "true"),
        "removal always on": lambda d: first(d, "initContainers").__setitem__("command", [WRAPPER, "stale", "--remove", "--backups-in", BACKUP_MOUNT, "--keep-backups", "$(KEEP_BACKUPS)", "--exit-zero"]),
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
