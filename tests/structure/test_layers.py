"""The package's structure rules, read from the source (ast), as test_coherence.py checks purity.

Each rule's known exceptions are named here with a reason:

- production modules do not import the test doubles (``smartarray._strict``,
  ``smartarray._fakegpu``) other than at the documented switch points;
- no module imports a module of a higher layer (``LAYERS``, lowest first: each private package
  is one layer's room);
- no import circle: a module's imports (at module level or inside functions, not under
  ``if TYPE_CHECKING:``) never lead back to it; counting the type-only imports too, the
  circles and upward imports left are named (``KNOWN_TYPE_ONLY_CIRCLES``,
  ``TYPE_UPWARD_IMPORTS``, and in CONTRIBUTING.md);
- a private package's ``__init__`` imports nothing and lists in ``__all__`` the modules the
  rest may import (``FACADES`` re-export names instead), and nothing outside it imports
  another of its modules, not even for types;
- no module reads or writes a private name (``x._name``, or ``getattr(x, "_name")``) that only
  another layer defines: a layer reaches another's objects through their interface (public
  names, or a protocol the reading layer defines, such as the engine's
  ``_engine/interface.py``, whose functions the layers above call);
- one module reads the environment, ``_platform/environment.py``; the other readers left are
  named here with their reason (setting a variable, for numba or a child, is no read);
- sizes are a report, not a rule: ``python tools/size_report.py`` lists modules over 500 lines,
  classes over 400 and functions over 80 (a hint to look, never a reason to carve a concept);
  the one test here checks that the report finds an oversized function.

A new forbidden import or a grown circle fails; so does a fixed
exception, so the lists only shrink.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from tools.size_report import MAX_FUNCTION_LINES, oversized

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "smartarray"
TEST_DOUBLES = ("smartarray._strict", "smartarray._fakegpu")

# Production -> test double imports allowed, with the reason.
DOUBLE_IMPORTS = {
    ("smartarray", "smartarray._strict"): "switch point: SMARTARRAY_STRICT installs strict mode",
    (
        "smartarray",
        "smartarray._fakegpu",
    ): "switch point: SMARTARRAY_FAKE_GPU loads the fake driver",
    ("smartarray.testing", "smartarray._strict"): "testing is strict mode's public face",
    ("smartarray.testing", "smartarray._strict.state"): "testing is strict mode's public face",
    ("smartarray.testing", "smartarray._strict.launch"): "testing is strict mode's public face",
}

# Import circles known today, with the reason. Each must stay exactly as listed (or vanish
# from here when fixed). None is left (the array layer's and strict mode's are gone).
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def _modules(room: str, *names: str) -> frozenset[str]:
    return frozenset(f"smartarray.{room}{name}" for name in names)


# Circles that appear when the imports under ``if TYPE_CHECKING:`` count too, with the reason
# (CONTRIBUTING.md names them). Each must stay exactly as listed (or vanish when fixed).
KNOWN_TYPE_ONLY_CIRCLES: dict[frozenset[str], str] = {
    _modules("_array.", "arguments", "copies", "exchange", "geometry", "ndarray", "numpy_api")
    | _modules("_array.", "protocols", "results", "views")
    | _modules("_interop.", "device_objects", "dlpack", "exports", "foreign")
    | {"smartarray.array", "smartarray._engine.array_classes"}: (
        "the class statement binds its concept modules' and the interop layer's functions, "
        "which annotate their ``self`` with the class (TYPE_UPWARD_IMPORTS for the layers below)"
    ),
}

# Imports of a higher layer under ``if TYPE_CHECKING:`` (annotations only), with the reason.
_BOUND = "annotates the SmartArray its functions are bound into or construct (never imported)"
TYPE_UPWARD_IMPORTS: dict[tuple[str, str], str] = {
    ("smartarray._engine.array_classes", "smartarray.array"): "the registered classes' type",
    **{
        (f"smartarray._interop.{name}", "smartarray.array"): _BOUND
        for name in ("device_objects", "dlpack", "exports", "foreign")
    },
}


# The layers, lowest first: a module imports only its own layer and lower ones at run time.
# Each private package is one layer's room (its ``__init__`` lists what the rest may import);
# the test doubles (_strict, _fakegpu) are outside the layers: DOUBLE_IMPORTS rules them.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the foundation: the pure coherence model, errors, the platform (environment, simulator)
    ("coherence", "errors", "_version", "_platform"),
    # what users see of transfers, and the public modules that record and guard them
    ("_observe", "guard", "stats"),
    ("_memory", "memory"),  # memory, streams, devices
    # numba's side of a SmartArray (its types; ArrayArgument, SmartArray's base class), and
    # the kernel access inference
    ("_numba", "_access"),
    ("_engine",),  # the coherence engine
    # interop: device objects, the CUDA Array Interface, DLPack (below the class statement,
    # which binds their functions: they test SmartArray's base class, construct through
    # _engine.array_classes)
    ("_interop",),
    # the class statement, the concept modules it binds and the record view (a subclass)
    ("array", "_array"),
    # what builds on the array: numba's wrappers and hints, *_like, several devices and
    # processes
    ("jit", "hints", "_like", "_distributed"),
    ("", "testing", "mpi", "__main__", "_demo", "_cli"),  # the public API ("" the package)
)

# Imports from a lower layer to a higher one allowed today, with the reason.
UPWARD_IMPORTS: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> int:
    """The layer of a module of the package (its top-level name below ``smartarray``)."""
    top = module.split(".")[1] if "." in module else ""
    for rank, names in enumerate(LAYERS):
        if top in names:
            return rank
    raise LookupError(f"{module} is in no layer: add it to LAYERS")


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) for each runtime import of a higher layer's module."""

    def placed(m: str) -> bool:
        return not m.startswith(TEST_DOUBLES)

    return {
        (name, imported)
        for name, imports in graph.items()
        if placed(name)
        for imported in imports
        if placed(imported) and layer_of(imported) > layer_of(name)
    }


def module_files(package: pathlib.Path) -> dict[str, pathlib.Path]:
    """Map every module's dotted name to its file."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def runtime_imports(
    name: str, path: pathlib.Path, known: set[str], type_only: bool = False
) -> set[str]:
    """The package modules ``name`` imports when it runs (``if TYPE_CHECKING:`` left out, but
    with ``type_only``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def target(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = package.split(".")
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test) and not type_only:
                for stmt in child.orelse:
                    visit(stmt)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                module = target(child)
                for alias in child.names:
                    full = f"{module}.{alias.name}"
                    found.add(full if full in known else module)
            else:
                visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in known and m != name}


def import_graph(package: pathlib.Path, type_only: bool = False) -> dict[str, set[str]]:
    """Every module's runtime imports of the package's own modules (and type-only ones, with
    ``type_only``)."""
    modules = module_files(package)
    known = set(modules)
    return {name: runtime_imports(name, path, known, type_only) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The import circles: strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()

    def connect(v: str) -> None:  # Tarjan; the graph is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def double_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(production module, test double module) for each such runtime import."""
    return {
        (name, imported)
        for name, imports in graph.items()
        if not name.startswith(TEST_DOUBLES)
        for imported in imports
        if imported.startswith(TEST_DOUBLES)
    }


def package_interfaces(package: pathlib.Path) -> dict[str, set[str]]:
    """Each subpackage's ``__all__`` (what the rest may import), read from its ``__init__``."""
    found = {}
    for init in package.rglob("__init__.py"):
        if init.parent == package:
            continue
        name = ".".join(init.parent.relative_to(package.parent).parts)
        for node in ast.parse(init.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                found[name] = set(ast.literal_eval(node.value))
    return found


def interface_breaches(package: pathlib.Path) -> set[tuple[str, str]]:
    """(importer, module) for each import, type-only ones too, of a private subpackage's module
    from outside that subpackage that its ``__init__`` does not list in ``__all__``."""
    interfaces = package_interfaces(package)
    breaches = set()
    for name, imports in import_graph(package, type_only=True).items():
        for imported in imports:
            room, _, leaf = imported.rpartition(".")
            if room.startswith(TEST_DOUBLES) or not room.split(".")[-1].startswith("_"):
                continue  # the doubles (DOUBLE_IMPORTS rules them), a public package
            if room not in interfaces:
                continue  # the package's own top level
            inside = name == room or name.startswith(room + ".")
            if not inside and leaf not in interfaces[room]:
                breaches.add((name, imported))
    return breaches


# Private packages whose ``__init__`` re-exports names (their ``__all__`` lists those), with
# the reason; every other one imports nothing and lists the modules the rest may import.
FACADES = {"smartarray._access": "the kernel access analysis: one entry point and its results"}


def test_private_packages_list_their_interface_and_import_nothing() -> None:
    """A private package's ``__init__`` lists modules that exist and imports nothing: importing
    one of its modules loads only what that module needs (numba.cuda must not load before the
    fake driver or strict mode is chosen)."""
    modules = module_files(PACKAGE)
    interfaces = package_interfaces(PACKAGE)
    rooms = {
        room
        for room in interfaces
        if room.split(".")[-1].startswith("_") and not room.startswith(TEST_DOUBLES)
    }
    assert set(FACADES) <= rooms
    for room in rooms - set(FACADES):
        listed = interfaces[room]
        assert {f"{room}.{leaf}" for leaf in listed} <= set(modules), room
        tree = ast.parse(modules[room].read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)], room


def test_other_layers_import_only_what_a_package_lists() -> None:
    assert interface_breaches(PACKAGE) == set()


def test_an_import_of_an_unlisted_module_is_found(tmp_path: pathlib.Path) -> None:
    files = {
        "__init__.py": "",
        "_engine/__init__.py": '__all__ = ["buffer"]\n',
        "_engine/buffer.py": "from . import launch\n",  # inside the room: fine
        "_engine/launch.py": "",
        "array.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from ._engine import launch\nfrom ._engine import buffer\n",
    }
    found = interface_breaches(_tree(tmp_path, files))
    assert found == {("smartarray.array", "smartarray._engine.launch")}


def test_production_imports_test_doubles_only_at_named_points() -> None:
    assert double_imports(import_graph(PACKAGE)) == set(DOUBLE_IMPORTS)


def test_no_import_reaches_a_higher_layer_but_the_known_ones() -> None:
    assert upward_imports(import_graph(PACKAGE)) == set(UPWARD_IMPORTS)


def test_a_new_upward_import_is_found(tmp_path: pathlib.Path) -> None:
    files = {"__init__.py": "", "errors.py": "def f():\n    from . import array\n", "array.py": ""}
    found = upward_imports(import_graph(_tree(tmp_path, files)))
    assert found == {("smartarray.errors", "smartarray.array")}


def test_no_import_circle_but_the_known_ones() -> None:
    assert circles(import_graph(PACKAGE)) == set(KNOWN_CIRCLES)


def test_type_only_imports_close_no_circle_but_the_known_ones() -> None:
    assert circles(import_graph(PACKAGE, type_only=True)) == set(KNOWN_TYPE_ONLY_CIRCLES)


def test_no_type_only_import_reaches_a_higher_layer_but_the_known_ones() -> None:
    graph = import_graph(PACKAGE, type_only=True)
    assert upward_imports(graph) == set(UPWARD_IMPORTS) | set(TYPE_UPWARD_IMPORTS)


def test_known_type_only_exceptions_are_named_in_contributing() -> None:
    """Each circle and upward import left when type-only imports count is named in
    CONTRIBUTING.md with its reason (by one of its modules' paths)."""
    text = (PACKAGE.parent / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for circle in KNOWN_TYPE_ONLY_CIRCLES:
        assert any(m.replace(".", "/") + ".py" in text for m in circle), sorted(circle)
    for importer, _ in TYPE_UPWARD_IMPORTS:
        assert importer.replace(".", "/") + ".py" in text, importer


def _tree(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    package = tmp_path / "smartarray"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


@pytest.mark.parametrize(
    "statement",
    [
        "from . import b\n",
        "from .b import thing\n",
        "import smartarray.b\n",
        "def f():\n    from . import b\n",
    ],
)
def test_a_new_circle_is_found(tmp_path: pathlib.Path, statement: str) -> None:
    package = _tree(tmp_path, {"__init__.py": "", "a.py": statement, "b.py": "from .a import x\n"})
    assert circles(import_graph(package)) == {frozenset({"smartarray.a", "smartarray.b"})}


def test_a_type_only_import_is_no_circle(tmp_path: pathlib.Path) -> None:
    a = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\n"
    package = _tree(tmp_path, {"__init__.py": "", "a.py": a, "b.py": "from .a import x\n"})
    assert circles(import_graph(package)) == set()
    # ... at run time: counting type-only imports, it is one
    found = circles(import_graph(package, type_only=True))
    assert found == {frozenset({"smartarray.a", "smartarray.b"})}


def test_a_type_only_upward_import_is_found(tmp_path: pathlib.Path) -> None:
    errors = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .array import A\n"
    package = _tree(tmp_path, {"__init__.py": "", "errors.py": errors, "array.py": ""})
    assert upward_imports(import_graph(package)) == set()
    found = upward_imports(import_graph(package, type_only=True))
    assert found == {("smartarray.errors", "smartarray.array")}


def test_production_importing_a_double_is_found(tmp_path: pathlib.Path) -> None:
    files = {
        "__init__.py": "",
        "_strict/__init__.py": "",
        "_strict/state.py": "from . import __name__ as _own\n",  # doubles may import themselves
        "engine.py": "from ._strict import state\n",
    }
    found = double_imports(import_graph(_tree(tmp_path, files)))
    assert found == {("smartarray.engine", "smartarray._strict.state")}


# -- private names across layers ----------------------------------------------------------

# Reads of another layer's private names known today, (module, name) with the reason. Each
# must stay exactly as listed (or vanish from here when fixed).
KNOWN_PRIVATE_READS: dict[tuple[str, str], str] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _layer(module: str) -> str:
    return "doubles" if module.startswith(TEST_DOUBLES) else str(layer_of(module))


def defined_names(package: pathlib.Path) -> dict[str, set[str]]:
    """The names each layer defines, by layer: a module's top-level names, a class body's
    (methods, attributes, ``__slots__``, a protocol's members) and what its methods assign
    to ``self``."""
    found: dict[str, set[str]] = {}
    for name, path in module_files(package).items():
        names = found.setdefault(_layer(name), set())
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
            for node in scope.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(node.name)
                targets = node.targets if isinstance(node, ast.Assign) else []
                if isinstance(node, ast.AnnAssign):
                    targets = [node.target]
                for target in targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                    if isinstance(target, ast.Name) and target.id == "__slots__":
                        names.update(ast.literal_eval(node.value))
            if isinstance(scope, ast.ClassDef):
                names.update(
                    n.attr
                    for n in ast.walk(scope)
                    if isinstance(n, ast.Attribute)
                    and isinstance(n.ctx, ast.Store)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == "self"
                )
    return found


_ATTRIBUTE_CALLS = ("getattr", "setattr", "hasattr", "delattr")


def private_reads(package: pathlib.Path) -> set[tuple[str, str]]:
    """(module, name) for each use of a private attribute ``name`` (``x._name``, or a
    constant string given to ``getattr``, ``setattr``, ``hasattr``, ``delattr``) that the
    module's layer does not define and another layer does. A class's methods using their own
    ``self`` or ``cls`` are left out; names no layer defines (other libraries') too."""
    defined = defined_names(package)
    found = set()

    def visit(node: ast.AST, module: str, own: set[str], in_method: bool) -> None:
        for child in ast.iter_child_nodes(node):
            name, owner = None, None
            if isinstance(child, ast.Attribute):
                name, owner = child.attr, child.value
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name)
                and child.func.id in _ATTRIBUTE_CALLS
                and len(child.args) >= 2
                and isinstance(child.args[1], ast.Constant)
                and isinstance(child.args[1].value, str)
            ):
                name, owner = child.args[1].value, child.args[0]
            mine = in_method and isinstance(owner, ast.Name) and owner.id in ("self", "cls")
            if (
                name is not None
                and _private(name)
                and not mine
                and name not in own
                and any(name in names for names in defined.values())
            ):
                found.add((module, name))
            method = isinstance(node, ast.ClassDef) and isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef
            )
            visit(child, module, own, in_method or method)

    for module, path in module_files(package).items():
        if module.startswith(TEST_DOUBLES):
            continue  # doubles stand in for other libraries: DOUBLE_IMPORTS rules them
        own = defined.get(_layer(module), set())
        visit(ast.parse(path.read_text(encoding="utf-8")), module, own, False)
    return found


def test_no_layer_reads_another_layers_private_names_but_the_known_ones() -> None:
    assert private_reads(PACKAGE) == set(KNOWN_PRIVATE_READS)


_SMARTARRAY = "class SmartArray:\n    __slots__ = ('_buf', '_lo')\n    _buf: object\n"


@pytest.mark.parametrize(
    "statement",
    [
        "def f(a):\n    return a._buf\n",
        "def f(a):\n    return getattr(a, '_buf')\n",
        "def f(a):\n    return hasattr(a, '_lo')\n",
        "def f(a):\n    a._lo = 0\n",
        "def f(self):\n    return self._buf\n",  # a function bound into SmartArray
        "class V:\n    def f(self, a):\n        return a._buf\n",
    ],
)
def test_a_read_of_another_layers_private_name_is_found(
    tmp_path: pathlib.Path, statement: str
) -> None:
    files = {"__init__.py": "", "array.py": _SMARTARRAY, "_interop/exports.py": statement}
    name = "_lo" if "_lo" in statement else "_buf"
    assert private_reads(_tree(tmp_path, files)) == {("smartarray._interop.exports", name)}


def test_a_renamed_slot_is_still_private_to_its_layer(tmp_path: pathlib.Path) -> None:
    array = _SMARTARRAY.replace("_buf", "_buffer")
    reads = "def f(a):\n    return a._buffer, a._buf, a._other\n"  # (_buf, _other: defined by none)
    files = {"__init__.py": "", "array.py": array, "_interop/exports.py": reads}
    assert private_reads(_tree(tmp_path, files)) == {("smartarray._interop.exports", "_buffer")}


def test_own_names_and_an_interface_protocol_pass(tmp_path: pathlib.Path) -> None:
    interface = (
        "from typing import Protocol\n"
        "class BufferView(Protocol):\n    _buf: object\n"
        "def buffer(view):\n    return view._buf\n"  # the engine's interface
    )
    files = {
        "__init__.py": "",
        "array.py": _SMARTARRAY + "    def f(self):\n        return self._lo\n",
        "_array/copies.py": "def f(self):\n    return self._buf, self._lo\n",  # same layer
        "_engine/interface.py": interface,
        "_interop/exports.py": "from .._engine import interface\n"
        "def f(a):\n    return interface.buffer(a).lock, a.__class__\n",
    }
    assert private_reads(_tree(tmp_path, files)) == set()


# -- the environment ------------------------------------------------------------------------

ENVIRONMENT = "smartarray._platform.environment"
# Modules that read the environment other than ENVIRONMENT, with the reason. Each must stay
# exactly as listed (or vanish from here when fixed).
KNOWN_ENVIRONMENT_READERS = {
    "smartarray._cli": "copies it for a child process (with the simulator's switch)",
    "smartarray.__main__": "copies it for a child process (the benchmarks', the fake driver's)",
}
_WRITES = ("setdefault", "pop", "update")  # (os.environ.setdefault(...): no read)


def environment_readers(package: pathlib.Path) -> set[str]:
    """The modules that read ``os.environ`` or call ``os.getenv`` (an assignment to
    ``os.environ[name]`` or a call of its ``setdefault``, ``pop`` or ``update`` is no read)."""
    found = set()
    for module, path in module_files(package).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "os"
                and any(a.name in ("environ", "environb", "getenv") for a in node.names)
            ):
                found.add(module)
            if not (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
                and node.attr in ("environ", "environb", "getenv")
            ):
                continue
            up = parents.get(node)
            stored = isinstance(up, ast.Subscript) and isinstance(up.ctx, ast.Store | ast.Del)
            written = isinstance(up, ast.Attribute) and up.attr in _WRITES
            if not (stored or written):
                found.add(module)
    return found - {ENVIRONMENT}


def test_only_the_environment_module_reads_the_environment_but_the_known_ones() -> None:
    assert environment_readers(PACKAGE) == set(KNOWN_ENVIRONMENT_READERS)


@pytest.mark.parametrize(
    "text, read",
    [
        ("import os\nx = os.environ.get('A')\n", True),
        ("import os\nx = os.environ['A']\n", True),
        ("import os\nx = 'A' in os.environ\n", True),
        ("import os\nx = os.getenv('A')\n", True),
        ("from os import environ\n", True),
        ("import os\nos.environ['A'] = '1'\n", False),
        ("import os\nos.environ.setdefault('A', '1')\n", False),
    ],
)
def test_a_read_of_the_environment_is_found(tmp_path: pathlib.Path, text: str, read: bool) -> None:
    package = _tree(tmp_path, {"__init__.py": "", "guard.py": text})
    assert environment_readers(package) == ({"smartarray.guard"} if read else set())


# Sizes a maintainer can hold in their head: reported by tools/size_report.py, never enforced
# (a cap made classes be carved into helpers to fit it; CONTRIBUTING.md says which form we use).
def test_an_oversized_function_is_found(tmp_path: pathlib.Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    package = _tree(tmp_path, {"__init__.py": "", "a.py": f"def long():\n{body}"})
    assert oversized(package) == {"smartarray/a.py:long"}
