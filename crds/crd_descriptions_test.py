#!/usr/bin/env python3
"""Fails when a field of a Kubicle CRD schema has no description.

`kubectl explain sandbox.spec.env` prints the schema's descriptions, so a
field without one is an undocumented part of the API. This walks
openAPIV3Schema of every version of every CRD in the given directory (default:
the directory of this file) and prints each property, at any depth (nested
objects, array items, map values), that lacks a non-empty `description`, as
`<crd> <version> <path>`, e.g. `sandboxes.kubicle.dev v1alpha1 .spec.env[].name`.
The one exception is the root `metadata`, which must have no description: the
apiserver forbids one there (it serves ObjectMeta's).
Exit status: 0 when all are described, 1 otherwise. Run by CTest as
crd_descriptions (helm/CMakeLists.txt).

Before looking at the CRDs it checks itself on synthetic schemas, so it cannot
pass because the walk silently visits nothing.
"""

import pathlib
import sys

import yaml


def missing_descriptions(schema, path=""):
    """Paths under `schema` (itself at `path`) whose property lacks a description.

    The root (path "") must be described too. Array `items` and map
    `additionalProperties` are walked for their properties; the array or map
    field itself carries the description `kubectl explain` shows.
    """
    found = []
    if not isinstance(schema, dict):
        return found
    if path == "" and not _described(schema):
        found.append(".")
    for name, prop in (schema.get("properties") or {}).items():
        child = f"{path}.{name}"
        if child == ".metadata":
            # The apiserver rejects a CRD whose root metadata schema holds
            # anything but name/generateName rules, a description included;
            # `kubectl explain <kind>.metadata` shows ObjectMeta's own.
            if "description" in prop:
                found.append(f"{child} (must have none: the apiserver forbids it)")
            continue
        if not _described(prop):
            found.append(child)
        found.extend(missing_descriptions(prop, child))
    items = schema.get("items")
    if isinstance(items, dict):
        found.extend(missing_descriptions(items, f"{path}[]"))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        found.extend(missing_descriptions(extra, f"{path}{{}}"))
    for combinator in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(combinator) or []:
            found.extend(missing_descriptions(sub, path))
    return found


def _described(node):
    text = node.get("description") if isinstance(node, dict) else None
    return isinstance(text, str) and text.strip() != ""


def self_check():
    """The walk must report a missing description at every kind of depth."""
    described = {"description": "d"}
    schema = {
        "type": "object",
        "description": "root",
        "properties": {
            "spec": {
                "type": "object",
                "description": "spec",
                "properties": {
                    "env": {
                        "type": "array",
                        "description": "env",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "value": dict(described, type="string"),
                            },
                        },
                    },
                    "labels": {
                        "type": "object",
                        "description": "labels",
                        "additionalProperties": {
                            "type": "object",
                            "properties": {"v": {"type": "string", "description": " "}},
                        },
                    },
                },
            },
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
        },
    }
    got = sorted(missing_descriptions(schema))
    want = sorted([".spec.env[].name", ".spec.labels{}.v", ".kind"])
    _expect(got == want, f"reported {got}, expected {want}")
    del schema["description"]
    _expect("." in missing_descriptions(schema), "an undescribed root was not reported")
    _expect(missing_descriptions({"description": "x", "properties": {"a": described}}) == [],
            "a fully described schema was reported")
    _expect(missing_descriptions({"description": "x", "properties": {"metadata": described}}) ==
            [".metadata (must have none: the apiserver forbids it)"],
            "a description on the root metadata was not reported")


def _expect(ok, what):
    # Not `assert`: python3 -O would drop it and the test would pass vacuously.
    if not ok:
        raise SystemExit(f"crd_descriptions: self-check failed: {what}")


def check_dir(directory):
    """Returns (number of schemas checked, list of problem lines)."""
    checked, problems = 0, []
    files = sorted(pathlib.Path(directory).glob("*.yaml"))
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            crd = doc["metadata"]["name"]
            for version in doc["spec"]["versions"]:
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema is None:
                    problems.append(f"{crd} {version['name']} has no openAPIV3Schema")
                    continue
                checked += 1
                for p in missing_descriptions(schema):
                    problems.append(f"{crd} {version['name']} {p}")
    return checked, problems


def main(argv):
    self_check()
    directory = argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parent
    checked, problems = check_dir(directory)
    if checked == 0:
        print(f"crd_descriptions: no CRD schemas found in {directory}", file=sys.stderr)
        return 1
    for p in problems:
        print(p)
    if problems:
        print(f"crd_descriptions: {len(problems)} field(s) without a description "
              f"(see docs/api.md for the wording)", file=sys.stderr)
        return 1
    print(f"crd_descriptions: {checked} schema(s) in {directory}: every field is described")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
