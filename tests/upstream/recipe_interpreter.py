"""Evaluate Megatron-Bridge recipe functions from a snapshot without importing Bridge.

Bridge recipes are straight-line Python that build a ``ConfigContainer`` and assign fields
(``cfg.model.context_parallel_size = 2``). This module reads a recipe module from a bare git
snapshot and runs such a function on a small symbolic machine:

* calls to functions defined in Bridge's ``recipes`` package (``_sft_common``,
  ``default_squad_config``, module-local helpers) are evaluated the same way, recursively;
* calls to config dataclasses (``GPTSFTDatasetConfig(...)``, ``PackedSequenceSpecs(...)``) build a
  :class:`Obj` whose unset fields read the dataclass defaults, parsed from the class definition in
  the snapshot (Bridge, and Megatron-Core at Bridge's pinned submodule commit);
* any other call (``AutoBridge.from_hf_pretrained(...)``, optimizer helpers, ``torch`` dtypes) gives an
  :class:`Obj` of unknown type that records what is assigned to it; the model provider reads
  Megatron-Core's ``TransformerConfig`` defaults for fields the recipe never sets.

Anything the machine cannot decide (a branch on an unknown value, an unsupported statement) raises
:class:`Unsupported`, and the caller reports the recipe as not convertible, with the reason. No
upstream code is executed or copied.
"""

from __future__ import annotations

import ast
import operator
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MISSING = object()


class Unsupported(Exception):
    """The recipe uses something this interpreter does not model."""


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


@dataclass
class Unknown:
    """A value the interpreter cannot know (e.g. read from a Hugging Face config at run time)."""

    what: str

    def __repr__(self) -> str:
        return f"<unknown {self.what}>"


@dataclass
class Obj:
    """A config object: explicit attributes plus the defaults of its class (when known)."""

    type_name: str
    attrs: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        if name in self.defaults:
            value = self.defaults[name]
            if isinstance(value, (dict, list)):  # default_factory results are per instance
                value = type(value)(value)
                self.attrs[name] = value
            return value
        return Unknown(f"{self.type_name}.{name}")


@dataclass
class Function:
    """A function defined in an interpreted module."""

    node: ast.FunctionDef
    module: "Module"


@dataclass
class Module:
    """A parsed module of the snapshot and its evaluated globals."""

    name: str
    path: str
    tree: ast.Module
    globals: dict[str, Any] = field(default_factory=dict)


class Snapshot:
    """Reads files from bare git snapshots in one ``git cat-file --batch`` process per repository."""

    def __init__(self, git_dir: Path, commit: str) -> None:
        self.git_dir = git_dir
        self.commit = commit
        self._cache: dict[str, str | None] = {}
        self._proc: subprocess.Popen | None = None

    def read(self, path: str) -> str | None:
        if path not in self._cache:
            if self._proc is None:
                self._proc = subprocess.Popen(
                    ["git", "--git-dir", str(self.git_dir), "cat-file", "--batch"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                )
            assert self._proc.stdin and self._proc.stdout
            self._proc.stdin.write(f"{self.commit}:{path}\n".encode())
            self._proc.stdin.flush()
            header = self._proc.stdout.readline().decode().split()
            if len(header) < 3 or header[1] != "blob":
                self._cache[path] = None
            else:
                data = self._proc.stdout.read(int(header[2]))
                self._proc.stdout.readline()
                self._cache[path] = data.decode("utf-8")
        return self._cache[path]

    def close(self) -> None:
        if self._proc is not None:
            self._proc.stdin.close()  # type: ignore[union-attr]
            self._proc.wait()
            self._proc = None


_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.BitOr: operator.or_, ast.BitAnd: operator.and_,
}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}


def _known(value: Any, where: str) -> Any:
    if isinstance(value, Unknown):
        raise Unsupported(f"{where} depends on {value.what}")
    return value


class Interpreter:
    """Evaluates recipe functions of one Bridge snapshot (plus Megatron-Core for class defaults)."""

    #: Packages whose functions are evaluated (everything else is an opaque call).
    INTERPRETED = ("megatron.bridge.recipes",)

    def __init__(self, bridge: Snapshot, mcore: Snapshot | None) -> None:
        self.bridge = bridge
        self.mcore = mcore
        self.modules: dict[str, Module] = {}
        self._class_defaults: dict[str, dict[str, Any] | None] = {}
        self._class_index: dict[str, tuple[Snapshot, str]] | None = None

    # -- modules and classes -------------------------------------------------------------------

    def module(self, dotted: str) -> Module | None:
        if dotted in self.modules:
            return self.modules[dotted]
        rel = dotted.replace(".", "/")
        for path in (f"src/{rel}.py", f"src/{rel}/__init__.py"):
            text = self.bridge.read(path)
            if text is not None:
                mod = Module(dotted, path, ast.parse(text))
                self.modules[dotted] = mod
                self._load_globals(mod)
                return mod
        return None

    def _load_globals(self, mod: Module) -> None:
        package = mod.name if mod.path.endswith("__init__.py") else mod.name.rsplit(".", 1)[0]
        for node in mod.tree.body:
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    mod.globals[alias.asname or alias.name] = ("import", base, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    mod.globals[alias.asname or alias.name.split(".")[0]] = Obj(f"module {alias.name}")
            elif isinstance(node, ast.FunctionDef):
                mod.globals[node.name] = Function(node, mod)
            elif isinstance(node, ast.ClassDef):
                mod.globals[node.name] = ("class", mod.name, node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        mod.globals[t.id] = ("lazy", node.value)

    def _global(self, mod: Module, name: str) -> Any:
        if name not in mod.globals:
            if name in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[name]
            builtin = _BUILTINS.get(name, MISSING)
            if builtin is not MISSING:
                return builtin
            return Obj(f"name {name}")
        value = mod.globals[name]
        if isinstance(value, tuple) and value and value[0] == "lazy":
            try:
                value = self.eval(value[1], {}, mod)
            except Unsupported:
                value = Unknown(f"{mod.name}.{name}")
            mod.globals[name] = value
        elif isinstance(value, tuple) and value and value[0] == "import":
            value = self._resolve_import(value[1], value[2])
            mod.globals[name] = value
        return value

    def _resolve_import(self, module: str, name: str) -> Any:
        if module.startswith(self.INTERPRETED):
            target = self.module(module)
            if target is not None and name in target.globals:
                return self._global(target, name)
            sub = self.module(f"{module}.{name}")
            if sub is not None:
                return sub
        return ("class", module, name)

    def class_defaults(self, name: str, module: str | None = None) -> dict[str, Any] | None:
        """Field defaults of a dataclass named ``name`` (Bridge src, then Megatron-Core), with its bases.

        ``module`` (dotted) pins where the class is defined; otherwise the first class of that name in
        Bridge's training/data/models packages, then Megatron-Core, is used.
        """
        key = f"{module}:{name}"
        if key in self._class_defaults:
            return self._class_defaults[key]
        self._class_defaults[key] = None  # recursion guard
        found = self._find_class(name, module)
        if found is None:
            return None
        node, mod = found
        out: dict[str, Any] = {}
        for base in node.bases:
            base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if not base_name:
                continue
            origin = mod.globals.get(base_name)
            if isinstance(origin, tuple) and origin and origin[0] == "import":
                out.update(self.class_defaults(origin[2], origin[1]) or {})
            else:
                out.update(self.class_defaults(base_name, mod.name if base_name in mod.globals else None) or {})
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                out[stmt.target.id] = self._default_value(stmt.value, mod)
        self._class_defaults[key] = out
        return out

    def _default_value(self, node: ast.expr | None, mod: Module) -> Any:
        if node is None:
            return Unknown("required field")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "field":
            for kw in node.keywords:
                if kw.arg == "default":
                    return self._default_value(kw.value, mod)
                if kw.arg == "default_factory":
                    if isinstance(kw.value, ast.Name) and kw.value.id in ("dict", "list"):
                        return {} if kw.value.id == "dict" else []
                    return Unknown("default_factory")
            return Unknown("field()")
        try:
            return self.eval(node, {}, mod)
        except Unsupported:
            return Unknown("default")

    def _class_path(self, module: str) -> tuple[Snapshot, str] | None:
        rel = module.replace(".", "/")
        if module.startswith("megatron.core"):
            candidates = [(self.mcore, f"{rel}.py"), (self.mcore, f"{rel}/__init__.py")]
        else:
            candidates = [(self.bridge, f"src/{rel}.py"), (self.bridge, f"src/{rel}/__init__.py")]
        for snap, path in candidates:
            if snap is not None and snap.read(path) is not None:
                return snap, path
        return None

    def _find_class(self, name: str, module: str | None = None) -> tuple[ast.ClassDef, Module] | None:
        if self._class_index is None:
            self._class_index = {}
            for snap, roots in ((self.bridge, ("src/megatron/bridge/training", "src/megatron/bridge/data", "src/megatron/bridge/models")),
                                (self.mcore, ("megatron/core",))):
                if snap is None:
                    continue
                listing = subprocess.run(
                    ["git", "--git-dir", str(snap.git_dir), "grep", "-n", "-E", r"^class \w+", snap.commit, "--", *roots],
                    capture_output=True, text=True, check=False,
                ).stdout
                for line in listing.splitlines():
                    _, path, _, text = line.split(":", 3)
                    cls = text[len("class "):].split("(")[0].split(":")[0].strip()
                    self._class_index.setdefault(cls, (snap, path))
        where = self._class_path(module) if module else None
        if where is not None:
            text = where[0].read(where[1]) or ""
            if not any(isinstance(n, ast.ClassDef) and n.name == name for n in ast.parse(text).body):
                # re-exported from a package __init__: follow its import of that name
                origin = self._module_at(*where).globals.get(name)
                if isinstance(origin, tuple) and origin and origin[0] == "import":
                    return self._find_class(origin[2], origin[1])
                where = None
        if where is None:
            where = self._class_index.get(name)
        if where is None:
            return None
        snap, path = where
        text = snap.read(path)
        if text is None:
            return None
        mod = self._module_at(snap, path)
        for node in mod.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node, mod
        return None

    def _module_at(self, snap: Snapshot, path: str) -> Module:
        dotted = path[:-3].replace("/", ".").removeprefix("src.").removesuffix(".__init__")
        if path.endswith("__init__.py"):
            dotted = path[: -len("/__init__.py")].replace("/", ".").removeprefix("src.")
        if dotted not in self.modules:
            mod = Module(dotted, path, ast.parse(snap.read(path) or ""))
            self.modules[dotted] = mod
            self._load_globals(mod)
        return self.modules[dotted]

    def new_object(self, type_name: str, kwargs: dict[str, Any], module: str | None = None) -> Obj:
        defaults = self.class_defaults(type_name, module) or {}
        return Obj(type_name, dict(kwargs), dict(defaults))

    # -- calls ----------------------------------------------------------------------------------

    def call_function(self, fn: Function, args: list[Any], kwargs: dict[str, Any]) -> Any:
        node = fn.node
        params = node.args
        env: dict[str, Any] = {}
        positional = list(params.posonlyargs) + list(params.args)
        defaults = [None] * (len(positional) - len(params.defaults)) + list(params.defaults)
        for i, p in enumerate(positional):
            if i < len(args):
                env[p.arg] = args[i]
            elif p.arg in kwargs:
                env[p.arg] = kwargs.pop(p.arg)
            elif defaults[i] is not None:
                env[p.arg] = self.eval(defaults[i], {}, fn.module)
            else:
                raise Unsupported(f"{node.name}() missing argument {p.arg}")
        for p, d in zip(params.kwonlyargs, params.kw_defaults):
            if p.arg in kwargs:
                env[p.arg] = kwargs.pop(p.arg)
            elif d is not None:
                env[p.arg] = self.eval(d, {}, fn.module)
            else:
                raise Unsupported(f"{node.name}() missing argument {p.arg}")
        if params.kwarg is not None:
            env[params.kwarg.arg] = dict(kwargs)
        elif kwargs:
            raise Unsupported(f"{node.name}() got unexpected arguments {sorted(kwargs)}")
        if params.vararg is not None:
            env[params.vararg.arg] = tuple(args[len(positional):])
        try:
            self.exec_block(node.body, env, fn.module)
        except _Return as ret:
            return ret.value
        return None

    def call(self, func: Any, args: list[Any], kwargs: dict[str, Any], where: str) -> Any:
        if isinstance(func, Function):
            return self.call_function(func, args, kwargs)
        if callable(func) and not isinstance(func, (Obj, Unknown)):
            if any(isinstance(a, (Unknown, Obj)) for a in [*args, *kwargs.values()]) and func not in _OBJECT_SAFE:
                return Unknown(f"{where}(...)")
            try:
                return func(*args, **kwargs)
            except (TypeError, ValueError) as exc:
                raise Unsupported(f"{where}(...) failed: {exc}") from exc
        if isinstance(func, tuple) and func and func[0] == "class":
            name = func[2]
            if name == "replace" and func[1] == "dataclasses":
                target = args[0]
                if isinstance(target, Obj):
                    return Obj(target.type_name, {**target.attrs, **kwargs}, dict(target.defaults))
            if name == "partial":
                return Obj("partial")
            if name[:1].isupper():
                return self.new_object(name, kwargs, func[1])
            return Obj(f"result of {func[1]}.{name}()")
        if isinstance(func, _BoundMethod):
            return func.call(self, args, kwargs)
        return Obj(f"result of {where}")

    # -- statements -----------------------------------------------------------------------------

    def exec_block(self, body: list[ast.stmt], env: dict[str, Any], mod: Module) -> None:
        for stmt in body:
            self.exec_stmt(stmt, env, mod)

    def exec_stmt(self, stmt: ast.stmt, env: dict[str, Any], mod: Module) -> None:
        if isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Constant):
                return  # docstring
            self.eval(stmt.value, env, mod)
        elif isinstance(stmt, ast.Assign):
            value = self.eval(stmt.value, env, mod)
            for target in stmt.targets:
                self.assign(target, value, env, mod)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.assign(stmt.target, self.eval(stmt.value, env, mod), env, mod)
        elif isinstance(stmt, ast.AugAssign):
            current = self.eval(stmt.target, env, mod)
            value = self.eval(stmt.value, env, mod)
            op = _BINOPS.get(type(stmt.op))
            if op is None:
                raise Unsupported(f"operator {type(stmt.op).__name__} at line {stmt.lineno}")
            self.assign(stmt.target, op(_known(current, "augmented assignment"), _known(value, "augmented assignment")),
                        env, mod)
        elif isinstance(stmt, ast.Return):
            raise _Return(self.eval(stmt.value, env, mod) if stmt.value is not None else None)
        elif isinstance(stmt, ast.If):
            test = _known(self.eval(stmt.test, env, mod), f"the condition at line {stmt.lineno}")
            self.exec_block(stmt.body if test else stmt.orelse, env, mod)
        elif isinstance(stmt, ast.For):
            items = _known(self.eval(stmt.iter, env, mod), f"the loop at line {stmt.lineno}")
            for item in list(items):
                self.assign(stmt.target, item, env, mod)
                self.exec_block(stmt.body, env, mod)
        elif isinstance(stmt, (ast.Pass, ast.Import, ast.ImportFrom, ast.Assert, ast.Delete)):
            return
        elif isinstance(stmt, ast.With):
            self.exec_block(stmt.body, env, mod)
        elif isinstance(stmt, ast.Try):
            # upstream catches errors here; a branch this machine cannot decide is skipped the same way
            try:
                self.exec_block(stmt.body, env, mod)
            except Unsupported:
                pass
            self.exec_block(stmt.finalbody, env, mod)
        elif isinstance(stmt, ast.Raise):
            raise Unsupported(f"the recipe raises at line {stmt.lineno}")
        elif isinstance(stmt, ast.FunctionDef):
            env[stmt.name] = Function(stmt, mod)
        else:
            raise Unsupported(f"statement {type(stmt).__name__} at line {stmt.lineno}")

    def assign(self, target: ast.expr, value: Any, env: dict[str, Any], mod: Module) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, ast.Attribute):
            owner = self.eval(target.value, env, mod)
            if isinstance(owner, Obj):
                owner.attrs[target.attr] = value
            elif not isinstance(owner, (Unknown, _BoundMethod)):
                raise Unsupported(f"assignment to .{target.attr} of {owner!r}")
        elif isinstance(target, ast.Subscript):
            owner = self.eval(target.value, env, mod)
            key = self.eval(target.slice, env, mod)
            if isinstance(owner, (dict, list)):
                owner[key] = value
            elif isinstance(owner, Obj):
                owner.attrs[f"[{key}]"] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, Obj) or isinstance(value, Unknown):
                for elt in target.elts:
                    self.assign(elt, Obj(f"item of {getattr(value, 'type_name', 'unknown')}"), env, mod)
            else:
                for elt, item in zip(target.elts, list(value)):
                    self.assign(elt, item, env, mod)
        else:
            raise Unsupported(f"assignment target {type(target).__name__}")

    # -- expressions ----------------------------------------------------------------------------

    def eval(self, node: ast.expr, env: dict[str, Any], mod: Module) -> Any:  # noqa: C901 - one dispatch
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            return self._global(mod, node.id)
        if isinstance(node, ast.Attribute):
            owner = self.eval(node.value, env, mod)
            if isinstance(owner, Obj):
                if owner.type_name.startswith(("name ", "result of", "module ", "item of", "partial")):
                    if node.attr in owner.attrs:
                        return owner.attrs[node.attr]
                    # a method when called; an unknown value when read
                    return _MaybeMethod(f"{owner.type_name}.{node.attr}", owner, node.attr)
                value = owner.get(node.attr)
                return value if not isinstance(value, Unknown) else _MaybeMethod(value.what, owner, node.attr)
            if isinstance(owner, Module):
                return self._global(owner, node.attr)
            if isinstance(owner, tuple) and owner and owner[0] == "class":
                return ("class", f"{owner[1]}.{owner[2]}", node.attr)
            if isinstance(owner, dict) and node.attr in ("get", "items", "keys", "values", "update", "setdefault"):
                return getattr(owner, node.attr)
            if isinstance(owner, _BoundMethod):
                return _BoundMethod(Obj("chain"), node.attr)
            if isinstance(owner, Unknown):
                return Unknown(f"{owner.what}.{node.attr}")
            return getattr(owner, node.attr, Unknown(f".{node.attr}"))
        if isinstance(node, ast.Call):
            func = self.eval(node.func, env, mod)
            args: list[Any] = []
            for a in node.args:
                if isinstance(a, ast.Starred):
                    args.extend(_known(self.eval(a.value, env, mod), "*args"))
                else:
                    args.append(self.eval(a, env, mod))
            kwargs: dict[str, Any] = {}
            for kw in node.keywords:
                if kw.arg is None:
                    kwargs.update(_known(self.eval(kw.value, env, mod), "**kwargs"))
                else:
                    kwargs[kw.arg] = self.eval(kw.value, env, mod)
            if isinstance(func, _MaybeMethod):
                func = _BoundMethod(func.owner, func.name)
            return self.call(func, args, kwargs, ast.unparse(node.func))
        if isinstance(node, ast.BinOp):
            left, right = self.eval(node.left, env, mod), self.eval(node.right, env, mod)
            if isinstance(left, Unknown) or isinstance(right, Unknown):
                return Unknown(ast.unparse(node))
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise Unsupported(f"operator {type(node.op).__name__}")
            try:
                return op(left, right)
            except TypeError:
                return Unknown(ast.unparse(node))
        if isinstance(node, ast.UnaryOp):
            value = self.eval(node.operand, env, mod)
            if isinstance(value, Unknown):
                return value
            if isinstance(node.op, ast.Not):
                return not value
            if isinstance(node.op, ast.USub):
                return -value
            return value
        if isinstance(node, ast.BoolOp):
            result: Any = None
            for v in node.values:
                result = self.eval(v, env, mod)
                if isinstance(result, Unknown):
                    return result
                if isinstance(node.op, ast.And) and not result:
                    return result
                if isinstance(node.op, ast.Or) and result:
                    return result
            return result
        if isinstance(node, ast.Compare):
            left = self.eval(node.left, env, mod)
            for op, comp in zip(node.ops, node.comparators):
                right = self.eval(comp, env, mod)
                if isinstance(left, Unknown) or isinstance(right, Unknown):
                    return Unknown(ast.unparse(node))
                try:
                    holds = _CMPOPS[type(op)](left, right)
                except TypeError:
                    return Unknown(ast.unparse(node))
                if not holds:
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            test = _known(self.eval(node.test, env, mod), "a conditional expression")
            return self.eval(node.body if test else node.orelse, env, mod)
        if isinstance(node, ast.Dict):
            out: dict[Any, Any] = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    out.update(_known(self.eval(v, env, mod), "**mapping"))
                else:
                    out[self.eval(k, env, mod)] = self.eval(v, env, mod)
            return out
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [self.eval(e, env, mod) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.JoinedStr):
            return "".join(
                str(self.eval(v.value, env, mod)) if isinstance(v, ast.FormattedValue) else str(v.value)
                for v in node.values
            )
        if isinstance(node, ast.Subscript):
            owner = self.eval(node.value, env, mod)
            key = self.eval(node.slice, env, mod)
            if isinstance(owner, (dict, list, tuple, str)):
                try:
                    return owner[key]
                except (KeyError, IndexError, TypeError):
                    return Unknown(ast.unparse(node))
            return Unknown(ast.unparse(node))
        if isinstance(node, ast.Slice):
            return slice(*(self.eval(x, env, mod) if x is not None else None for x in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.Lambda):
            return Obj("lambda")
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp)):
            return Unknown("comprehension")
        raise Unsupported(f"expression {type(node).__name__}")


@dataclass
class _MaybeMethod(Unknown):
    """An attribute of a config object that is either an unset field or a method (decided by a call)."""

    owner: Obj = field(default_factory=lambda: Obj("unknown"))
    name: str = ""


@dataclass
class _BoundMethod:
    owner: Obj
    name: str

    def call(self, interp: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.name in ("get_model_config", "to_megatron_provider", "provider"):
            return interp.new_object("TransformerConfig", {}, "megatron.core.transformer.transformer_config")
        return Obj(f"result of .{self.name}()")


_BUILTINS: dict[str, Any] = {
    "int": int, "str": str, "float": float, "bool": bool, "len": len, "max": max, "min": min, "dict": dict,
    "list": list, "tuple": tuple, "range": range, "isinstance": lambda v, c: _isinstance(v, c), "sorted": sorted,
    "getattr": lambda obj, name, default=None: obj.get(name) if isinstance(obj, Obj) else default,
    "hasattr": lambda obj, name: isinstance(obj, Obj) and not isinstance(obj.get(name), Unknown),
}

#: Builtins that accept config objects as arguments.
_OBJECT_SAFE = (_BUILTINS["getattr"], _BUILTINS["hasattr"], _BUILTINS["isinstance"])


def _isinstance(value: Any, cls: Any) -> Any:
    """``isinstance`` over interpreted values: config objects match by class name."""
    if isinstance(cls, tuple) and cls and cls[0] != "class":
        results = [_isinstance(value, c) for c in cls]
        if any(r is True for r in results):
            return True
        return Unknown("isinstance") if any(isinstance(r, Unknown) for r in results) else False
    if isinstance(value, Unknown):
        return Unknown("isinstance")
    if isinstance(cls, type):
        return isinstance(value, cls) and not isinstance(value, Obj)
    if isinstance(cls, tuple) and len(cls) == 3 and cls[0] == "class":
        if isinstance(value, Obj):
            return value.type_name == cls[2] if not value.type_name.startswith(("result of", "name ")) else Unknown(
                "isinstance")
        return False
    return Unknown("isinstance")

