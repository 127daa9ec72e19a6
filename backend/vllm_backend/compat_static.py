"""Whether a vLLM release has the names of `compat_names`, read from its sources with `ast` (no import).

A release that cannot be installed here (NGC images bundle CUDA builds) can still be checked: its wheel is
downloaded without dependencies and unzipped, and each name is looked up the way Python would resolve it:
top-level bindings, `from ... import` re-exports (relative ones too), aliases (`AsyncLLMEngine = AsyncLLM`),
lazy attribute tables (`"AsyncEngineArgs": ".engine.arg_utils:AsyncEngineArgs"`), and for class members
the class body, `self.<x> =` in its methods, and its base classes.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from vllm_backend.compat_names import Name

_MAX_DEPTH = 12


@dataclass(frozen=True)
class Found:
    """Where a name resolved: a class (with its node and module) or some other value."""

    module: str
    node: ast.AST | None


class SourceTree:
    """The Python sources of one release: a folder holding the `vllm` package."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._parsed: dict[str, ast.Module | None] = {}

    def module_path(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def parse(self, module: str) -> ast.Module | None:
        if module not in self._parsed:
            path = self.module_path(module)
            self._parsed[module] = ast.parse(path.read_text(encoding="utf-8")) if path else None
        return self._parsed[module]

    def is_package(self, module: str) -> bool:
        path = self.module_path(module)
        return path is not None and path.name == "__init__.py"

    # ---- names -------------------------------------------------------------------------------------

    def resolve(self, module: str, attr: str, depth: int = 0) -> Found | None:
        """Where `module.attr` comes from, or None if the module does not bind it."""
        tree = self.parse(module)
        if tree is None or depth > _MAX_DEPTH:
            return None
        for node in _top_level(tree.body):
            found = self._binding(module, node, attr, depth)
            if found is not None:
                return found
        if self.module_path(f"{module}.{attr}") is not None:  # a submodule
            return Found(f"{module}.{attr}", None)
        return None

    def _binding(self, module: str, node: ast.stmt, attr: str, depth: int) -> Found | None:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            return Found(module, node)
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node, self.is_package(module))
            for alias in node.names:
                if alias.name == "*":
                    found = self.resolve(source, attr, depth + 1)
                    if found is not None:
                        return found
                elif (alias.asname or alias.name) == attr:
                    return self.resolve(source, alias.name, depth + 1) or Found(source, None)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == attr:
                    return Found(alias.name, None)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
                value = node.value
                if isinstance(value, ast.Name) and value.id != attr:  # an alias of another binding
                    return self.resolve(module, value.id, depth + 1) or Found(module, None)
                return Found(module, None)
            lazy = _lazy_target(node.value, attr)
            if lazy is not None:
                source, name = lazy
                if source.startswith("."):
                    source = _absolute(module, ast.ImportFrom(module=source.lstrip(".") or None,
                                                              level=len(source) - len(source.lstrip("."))),
                                       self.is_package(module))  # fmt: skip
                return self.resolve(source, name, depth + 1)
        return None

    # ---- members -----------------------------------------------------------------------------------

    def class_members(self, found: Found, depth: int = 0) -> tuple[set[str], dict[str, ast.arguments]]:
        """Attribute names of a class (its bases' included) and the signatures of its functions."""
        node = found.node
        names: set[str] = set()
        signatures: dict[str, ast.arguments] = {}
        if not isinstance(node, ast.ClassDef) or depth > _MAX_DEPTH:
            return names, signatures
        for base in reversed(node.bases):  # the class's own members override its bases'
            base_found = self._resolve_expr(found.module, base, depth)
            if base_found is not None:
                base_names, base_signatures = self.class_members(base_found, depth + 1)
                names |= base_names
                signatures.update(base_signatures)
        for statement in _top_level(node.body):
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(statement.name)
                signatures[statement.name] = statement.args
                names |= _self_attributes(statement)
            elif isinstance(statement, ast.Assign):
                names |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                names.add(statement.target.id)
        return names, signatures

    def _resolve_expr(self, module: str, expr: ast.expr, depth: int) -> Found | None:
        if isinstance(expr, ast.Subscript):  # Generic[T], Base[int]
            expr = expr.value
        if isinstance(expr, ast.Name):
            return self.resolve(module, expr.id, depth + 1)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            holder = self.resolve(module, expr.value.id, depth + 1)
            if holder is not None and holder.node is None:  # a module
                return self.resolve(holder.module, expr.attr, depth + 1)
        return None

    def exists(self, name: Name) -> bool:
        """The static probe for `compat_names.choose`."""
        found = self.resolve(name.module, name.attr)
        if found is None:
            return False
        if name.member is None:
            return True
        names, signatures = self.class_members(found)
        if name.member not in names:
            return False
        if name.param is None:
            return True
        arguments = signatures.get(name.member)
        return arguments is not None and name.param in _parameter_names(arguments)


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a body, those inside if / try / with blocks included (not inside functions)."""
    result: list[ast.stmt] = []
    for node in body:
        result.append(node)
        if isinstance(node, ast.If):
            result += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            result += _top_level(node.body) + _top_level(node.orelse) + _top_level(node.finalbody)
            for handler in node.handlers:
                result += _top_level(handler.body)
        elif isinstance(node, ast.With):
            result += _top_level(node.body)
    return result


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _lazy_target(value: ast.expr | None, attr: str) -> tuple[str, str] | None:
    """A lazy-import table entry `"attr": "module:name"` (or `("module", "name")`)."""
    if not isinstance(value, ast.Dict):
        return None
    for key, item in zip(value.keys, value.values):
        if not (isinstance(key, ast.Constant) and key.value == attr):
            continue
        if isinstance(item, ast.Constant) and isinstance(item.value, str) and ":" in item.value:
            source, _, name = item.value.partition(":")
            return source, name
        if isinstance(item, ast.Tuple) and len(item.elts) == 2:
            parts = [e.value for e in item.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(parts) == 2:
                return parts[0], parts[1]
    return None


def _self_attributes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(function):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                names.add(target.attr)
    return names


def _parameter_names(arguments: ast.arguments) -> set[str]:
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return {argument.arg for argument in every}
