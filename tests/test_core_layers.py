"""No import cycles between toolgym's modules (the layers themselves are import-linter
contracts in pyproject.toml, checked by `lint-imports` in CI). A package's ``__init__`` that
defines a base class its own submodules import, and imports one of them lazily, is the usual
Python shape and not counted."""

from __future__ import annotations

import grimp


def test_no_module_imports_itself_back():
    graph = grimp.build_graph("toolgym", exclude_type_checking_imports=True)
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported.startswith(module + ".") or module.startswith(imported + "."):
                continue
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back:
                cycles.append(" -> ".join((module, *back)))
    assert cycles == []
