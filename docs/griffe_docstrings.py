"""Griffe extension for the API pages: the estimators' docstrings as Python builds them.

The estimators' parameter descriptions are written once and taken into each class's
docstring when its module is imported (``svbnn._estimator_base._fill_doc``); griffe reads
the source, so for those classes it takes the docstring from the imported class instead.
"""

from __future__ import annotations

import inspect
from typing import Any

import griffe


class RuntimeDocstrings(griffe.Extension):
    """Replace the docstring of classes decorated with ``_fill_doc`` by the built one."""

    def on_class(self, *, cls: griffe.Class, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if not any("_fill_doc" in str(d.value) for d in cls.decorators):
            return
        # Imported from the folders griffe reads (mkdocs.yml's paths: this checkout's src).
        paths = [str(p) for p in loader.finder.search_paths]
        built = inspect.getdoc(griffe.dynamic_import(cls.path, paths))
        old = cls.docstring
        cls.docstring = griffe.Docstring(
            built or "",
            parent=cls,
            parser=old.parser if old else None,
            parser_options=old.parser_options if old else None,
        )
