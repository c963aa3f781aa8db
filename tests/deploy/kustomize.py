"""A small kustomize for the features deploy/kubernetes uses, so the overlay's result is checked without a binary.

Implemented as kustomize does them: `resources` (files, and directories with their own
kustomization), `namespace` (set on every namespaced object), `images` (newName/newTag on containers
and init containers whose image has that name) and `patches` by path (strategic merge: maps merge,
lists of containers, env, volumes, volume mounts and ports merge by their Kubernetes merge keys,
other lists are replaced, a null deletes). Anything else in a kustomization.yaml is refused, so using
a new feature means implementing it here (and `kubectl kustomize`, where present, checks it matches).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KNOWN = {"apiVersion", "kind", "namespace", "resources", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass"}
# patchMergeKey of the lists the manifests patch (k8s.io/api core/v1 types)
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
}


def render(directory: Path) -> list[dict[str, Any]]:
    """The objects `kustomize build directory` gives (order aside)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KNOWN
    if unknown:
        raise NotImplementedError(f"{directory}: kustomization fields {sorted(unknown)} are not implemented here")
    docs: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            docs += render(path)
        else:
            docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for patch_entry in kustomization.get("patches", []):
        if set(patch_entry) != {"path"}:
            raise NotImplementedError(f"patch {patch_entry}: only `path` patches are implemented")
        for patch in yaml.safe_load_all((directory / patch_entry["path"]).read_text()):
            target = _find(docs, patch)
            docs[docs.index(target)] = merge(target, patch)
    for image in kustomization.get("images", []):
        for doc in docs:
            _set_image(doc, image)
    namespace = kustomization.get("namespace")
    if namespace:
        for doc in docs:
            if doc["kind"] not in CLUSTER_SCOPED:
                doc.setdefault("metadata", {})["namespace"] = namespace
    return docs


def _find(docs: list[dict[str, Any]], patch: dict[str, Any]) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == patch["kind"] and d["metadata"]["name"] == patch["metadata"]["name"]]
    if len(matches) != 1:
        raise ValueError(f"patch for {patch['kind']}/{patch['metadata']['name']} matches {len(matches)} objects")
    return matches[0]


def merge(base: Any, patch: Any, key: str = "") -> Any:
    """Strategic merge of `patch` into `base` (a new object; neither is changed)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = copy.deepcopy(base)
        for name, value in patch.items():
            if value is None:
                merged.pop(name, None)
            elif name in merged:
                merged[name] = merge(merged[name], value, name)
            else:
                merged[name] = copy.deepcopy(value)
        return merged
    merge_key = MERGE_KEYS.get(key)
    if isinstance(base, list) and isinstance(patch, list) and merge_key is not None:
        merged_list = copy.deepcopy(base)
        for item in patch:
            same = [i for i, old in enumerate(merged_list) if old.get(merge_key) == item.get(merge_key)]
            if same:
                merged_list[same[0]] = merge(merged_list[same[0]], item)
            else:
                merged_list.append(copy.deepcopy(item))
        return merged_list
    return copy.deepcopy(patch)


def _set_image(doc: dict[str, Any], image: dict[str, str]) -> None:
    pod = doc.get("spec", {}).get("template", {}).get("spec", {})
    for container in [*pod.get("containers", []), *pod.get("initContainers", [])]:
        name, _, tag = container["image"].partition(":")
        if name != image["name"]:
            continue
        container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}".rstrip(":")


def canonical(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], Any]:
    """Objects by (kind, namespace, name), with lists of named items sorted, for comparing two renderings."""

    def sort(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: sort(v) for k, v in value.items()}
        if isinstance(value, list):
            items = [sort(v) for v in value]
            for key in ("name", "mountPath", "containerPort"):
                if items and all(isinstance(i, dict) and key in i for i in items):
                    return sorted(items, key=lambda i: str(i[key]))
            return items
        return value

    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): sort(d) for d in docs}
