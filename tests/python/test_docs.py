"""Every public function, method and property of the package (python/weft, names without a
leading underscore, in classes without one) has a docstring, read from the source so that
modules needing PyTorch are checked without it."""

import ast
import os

import weft

PACKAGE = os.path.dirname(weft.__file__)


def public_without_docstring():
    missing = []
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path) as f:
                tree = ast.parse(f.read())
            scopes = [(tree.body, "")]
            while scopes:
                body, prefix = scopes.pop()
                for node in body:
                    if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                        scopes.append((node.body, prefix + node.name + "."))
                    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                            not node.name.startswith("_") and ast.get_docstring(node) is None:
                        missing.append("%s:%d %s%s" % (os.path.relpath(path, PACKAGE),
                                                       node.lineno, prefix, node.name))
    return missing


def test_every_public_function_has_a_docstring():
    missing = public_without_docstring()
    assert not missing, "no docstring: " + ", ".join(missing)
