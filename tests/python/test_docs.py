"""Every public function, method and property of the package (python/weft, names without a
leading underscore, in classes without one) has a docstring, and those of the modules
python/weft/*.py (not weft.torch) have type hints; read from the source so that modules
needing PyTorch are checked without it."""

import ast
import os
import sys

import weft

PACKAGE = os.path.dirname(weft.__file__)

# Methods whose names start with "_" but whose signatures are public: the constructor of a
# public class and the context-manager protocol (`with weft.init() as ctx`).
TYPED_DUNDERS = ("__init__", "__enter__", "__exit__")


def _parse(path):
    with open(path) as f:
        return ast.parse(f.read())


def _functions(tree, dunders=()):
    """(qualified name, node, is_method) of every function of @p tree whose name has no
    leading underscore (or is in @p dunders), at module level or in a class without one
    (nested classes too); functions inside functions are not part of the API."""
    scopes = [(tree.body, "", False)]
    while scopes:
        body, prefix, in_class = scopes.pop()
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                scopes.append((node.body, prefix + node.name + ".", True))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    (not node.name.startswith("_") or (in_class and node.name in dunders)):
                yield prefix + node.name, node, in_class


def public_without_docstring():
    missing = []
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            for qualname, node, _ in _functions(_parse(path)):
                if ast.get_docstring(node) is None:
                    missing.append("%s:%d %s" % (os.path.relpath(path, PACKAGE),
                                                 node.lineno, qualname))
    return missing


def test_every_public_function_has_a_docstring():
    missing = public_without_docstring()
    assert not missing, "no docstring: " + ", ".join(missing)


def _typed_modules():
    """python/weft/*.py, private modules included (their public names are the binding's
    internal API); not the weft.torch subpackage."""
    return [os.path.join(PACKAGE, n) for n in sorted(os.listdir(PACKAGE)) if n.endswith(".py")]


def _is_staticmethod(node):
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)


def _unannotated(node, is_method):
    """Names of @p node's parameters without an annotation, and "return" if it has none.
    Every parameter counts, *args and **kwargs included; only the first of a method
    (self, or cls of a classmethod) is exempt, as checkers infer it."""
    a = node.args
    params = a.posonlyargs + a.args
    if is_method and not _is_staticmethod(node):
        params = params[1:]
    params = params + a.kwonlyargs + [p for p in (a.vararg, a.kwarg) if p is not None]
    out = [p.arg for p in params if p.annotation is None]
    if node.returns is None:
        out.append("return")
    return out


def public_without_hints():
    missing = []
    for path in _typed_modules():
        for qualname, node, is_method in _functions(_parse(path), TYPED_DUNDERS):
            bare = _unannotated(node, is_method)
            if bare:
                missing.append("%s:%d %s (%s)" % (os.path.basename(path), node.lineno,
                                                  qualname, ", ".join(bare)))
    return missing


def _has_future_annotations(tree):
    return any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
               any(a.name == "annotations" for a in n.names) for n in tree.body)


def test_every_public_function_has_type_hints():
    missing = public_without_hints()
    assert not missing, "not annotated: " + "; ".join(missing)


def test_annotations_are_never_evaluated():
    """A module with annotations defers them (`from __future__ import annotations`), so
    they cost nothing at run time and may name torch and modules that import this one;
    the aliases of weft._types are for type checkers only (imported under TYPE_CHECKING)."""
    eager = []
    for path in _typed_modules():
        tree = _parse(path)
        annotated = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and
                        (n.returns is not None or any(
                            p.annotation is not None for p in
                            n.args.posonlyargs + n.args.args + n.args.kwonlyargs))
                        for n in ast.walk(tree))
        if annotated and not _has_future_annotations(tree):
            eager.append(os.path.basename(path))
    assert not eager, "annotated without `from __future__ import annotations`: " + \
        ", ".join(eager)
    assert "weft._types" not in sys.modules


def test_package_is_marked_typed():
    """PEP 561: the py.typed marker beside __init__.py (pyproject.toml installs it;
    test_install.py checks the installed package has it)."""
    assert os.path.isfile(os.path.join(PACKAGE, "py.typed"))
