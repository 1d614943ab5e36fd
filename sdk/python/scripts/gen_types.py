#!/usr/bin/env python3
"""Generates soba_sdk/protocol.py from the protocol's JSON Schemas (schemas/protocol/), which
are themselves generated from the daemon's Rust types. `--check` exits non-zero when the
committed file is not what the schemas produce, so the types cannot drift."""

import json
import keyword
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA_DIR = HERE.parents[2] / "schemas" / "protocol"
OUT = HERE.parent / "soba_sdk" / "protocol.py"

KNOWN = {
    "$schema", "$defs", "$ref", "title", "description", "type", "properties", "required",
    "items", "enum", "const", "anyOf", "oneOf", "allOf", "additionalProperties",
    # Validation and annotation keywords with no typing counterpart.
    "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
    "maxLength", "pattern", "minItems", "maxItems", "uniqueItems", "default", "examples",
    "deprecated", "readOnly", "writeOnly",
}


def pascal(s):
    return "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", s) if w)


class Generator:
    def __init__(self):
        self.simple = {}  # name -> code, emitted first
        self.composite = {}  # name -> code, emitted after (subclasses of simple ones)
        self.defs = {}  # ts-style name -> schema, for conflict checks

    def ref(self, node, names):
        return names[node["$ref"].removeprefix("#/$defs/")]

    def type_of(self, node, names, hint):
        """The annotation of a schema node; `hint` names inline variants."""
        if node is True or (isinstance(node, dict) and set(node) <= {"description"}):
            return "Any"
        unknown = set(node) - KNOWN
        if unknown:
            raise SystemExit(f"unsupported schema keyword {sorted(unknown)}; teach scripts/gen_types.py")
        if "const" in node:
            return f"Literal[{json.dumps(node['const'])}]"
        if "enum" in node:
            return f"Literal[{', '.join(json.dumps(v) for v in node['enum'])}]"
        variants = node.get("oneOf") or node.get("anyOf")
        if variants:
            non_null = [v for v in variants if v != {"type": "null"}]
            alts = [self.type_of(v, names, f"{hint}{self.tag(v, i)}") for i, v in enumerate(non_null)]
            t = alts[0] if len(alts) == 1 else f"Union[{', '.join(alts)}]"
            return f"Optional[{t}]" if len(non_null) < len(variants) else t
        if "$ref" in node:
            return self.ref(node, names)
        if node.get("allOf"):
            # TypedDicts do not intersect; the first part names the shape.
            return self.type_of(node["allOf"][0], names, hint)
        types = node.get("type")
        types = types if isinstance(types, list) else [types]
        nullable = "null" in types
        types = [t for t in types if t != "null"]
        if len(types) != 1:
            raise SystemExit(f"unsupported type {node.get('type')}")
        t = types[0]
        if t == "string":
            out = "str"
        elif t == "integer":
            out = "int"
        elif t == "number":
            out = "float"
        elif t == "boolean":
            out = "bool"
        elif t == "array":
            out = f"List[{self.type_of(node.get('items', True), names, hint + 'Item')}]"
        elif t == "object":
            if not node.get("properties"):
                extra = node.get("additionalProperties")
                value = self.type_of(extra, names, hint + "Value") if isinstance(extra, dict) else "Any"
                out = f"Dict[str, {value}]"
            else:
                self.emit_class(hint, node, names, self.simple)
                out = hint
        else:
            raise SystemExit(f"unsupported type {t}")
        return f"Optional[{out}]" if nullable else out

    @staticmethod
    def tag(variant, index):
        for key, prop in (variant.get("properties") or {}).items():
            if "const" in prop:
                return pascal(str(prop["const"]))
        if variant.get("title"):
            return pascal(str(variant["title"]))
        return f"Variant{index}"

    def emit_class(self, name, node, names, into, bases=("TypedDict",), extra=()):
        required = set(node.get("required", []))
        lines = [f"class {name}({', '.join(bases)}):"]
        if node.get("description"):
            doc = node["description"].replace("\n", "\n    ")
            lines.append(f'    """{doc}"""')
            lines.append("")
        fields = list(extra)
        for key, prop in (node.get("properties") or {}).items():
            if not key.isidentifier() or keyword.iskeyword(key):
                raise SystemExit(f"{name}.{key} is not a Python identifier")
            t = self.type_of(prop, names, name + pascal(key))
            fields.append((key, t if key in required else f"NotRequired[{t}]", prop.get("description") if isinstance(prop, dict) else None))
        for key, t, description in fields:
            if description:
                for line in description.split("\n"):
                    lines.append(f"    # {line}".rstrip())
            lines.append(f"    {key}: {t}")
        if len(lines) == 1:
            lines.append("    pass")
        into[name] = "\n".join(lines)

    def named(self, name, node, names):
        """A named type: an alias, a TypedDict, or a union of TypedDicts."""
        variants = node.get("oneOf") or node.get("anyOf")
        if node.get("properties") and variants:
            # Common fields, and one variant per `$ref`: `{type: const} & Ref` (tagged entries).
            base = f"{name}Fields"
            self.emit_class(base, {k: v for k, v in node.items() if k not in ("oneOf", "anyOf")}, names, self.simple)
            alts = []
            for i, v in enumerate(variants):
                vname = f"{name}{self.tag(v, i)}"
                bases = [base] + ([self.ref(v, names)] if "$ref" in v else [])
                own = {k: w for k, w in v.items() if k != "$ref"}
                self.emit_class(vname, own, names, self.composite, bases=bases)
                alts.append(vname)
            desc = f'\n"""{node["description"]}"""' if node.get("description") else ""
            self.composite[name] = f"{name} = Union[{', '.join(alts)}]{desc}"
            return
        if node.get("type") == "object" and node.get("properties"):
            self.emit_class(name, node, names, self.simple)
            return
        t = self.type_of(node, names, name)
        desc = f'\n"""{node["description"]}"""' if node.get("description") else ""
        self.simple[f"{name}"] = f"{name} = {t}{desc}"


def main():
    files = []
    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        stem = path.name.removesuffix(".schema.json")
        name, part = stem.rsplit(".", 1)
        files.append({"stem": stem, "part": part, "method": "soba/" + name.replace(".", "/"),
                      "schema": json.loads(path.read_text())})
    g = Generator()
    seen = {}
    # Result-side definitions keep the plain name; a params-side one that differs is `<Name>Input`.
    for f in sorted(files, key=lambda f: (f["part"] == "params", f["stem"])):
        f["names"] = {}
        for d, schema in (f["schema"].get("$defs") or {}).items():
            n = d
            if n in seen and seen[n] != schema:
                n = f"{d}Input"
                if n in seen and seen[n] != schema:
                    raise SystemExit(f"{f['stem']}: $defs/{d} differs from every earlier definition")
            seen[n] = schema
            f["names"][d] = n
    emitted = set()
    for f in files:
        for d, n in f["names"].items():
            if n not in emitted:
                emitted.add(n)
                g.named(n, f["schema"]["$defs"][d], f["names"])
    roots = []
    for f in files:
        root = {k: v for k, v in f["schema"].items() if k not in ("$defs", "$schema", "title")}
        root["description"] = f["schema"]["title"] + (f".\n\n{root['description']}" if root.get("description") else ".")
        name = pascal(f["stem"])
        g.named(name, root, f["names"])
        roots.append((f, name))

    out = [
        '"""Types of the SOBA protocol, generated by scripts/gen_types.py from',
        "schemas/protocol/*.schema.json. Do not edit: change the daemon's types, regenerate the",
        'schemas, then run `python3 scripts/gen_types.py`."""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any, Dict, List, Literal, NotRequired, Optional, TypedDict, Union",
        "",
    ]
    # Classes first (annotations are lazy), subclasses after their bases, then the aliases,
    # each after the names it uses.
    blocks = {**g.simple, **g.composite}
    classes = [n for n in sorted(g.simple) if blocks[n].startswith("class ")]
    classes += [n for n in sorted(g.composite) if blocks[n].startswith("class ")]
    aliases = [n for n in sorted(blocks) if not blocks[n].startswith("class ")]
    for name in classes:
        out += ["", blocks[name], ""]
    while aliases:
        rhs = {n: blocks[n].split(" = ", 1)[1].split("\n")[0] for n in aliases}
        ready = [n for n in aliases
                 if not any(a != n and re.search(rf"\b{a}\b", rhs[n]) for a in aliases)]
        if not ready:
            raise SystemExit(f"aliases refer to each other: {aliases}")
        for name in ready:
            out += ["", blocks[name], ""]
            aliases.remove(name)
    methods = [f for f, _ in roots if f["part"] == "params"]
    out += ["", "# Every request method: (params type, result type).", "METHODS = {"]
    for f in methods:
        stem = f["stem"].removesuffix(".params")
        out.append(f'    "{f["method"]}": ({pascal(stem + ".params")}, {pascal(stem + ".result")}),')
    out += ["}", "", "# Every notification the daemon sends: its params type.", "NOTIFICATIONS = {"]
    for f, name in roots:
        if f["part"] == "notification":
            out.append(f'    "{f["method"]}": {name},')
    out += ["}", ""]
    text = "\n".join(out)
    if "--check" in sys.argv:
        if not OUT.exists() or OUT.read_text() != text:
            sys.exit("soba_sdk/protocol.py is out of date with schemas/protocol/; run `python3 scripts/gen_types.py` and commit it.")
    else:
        OUT.write_text(text)


if __name__ == "__main__":
    main()
