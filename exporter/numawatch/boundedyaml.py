"""YAML loading for numawatch's own configuration files (the intent, the web config), bounded in nesting depth.

PyYAML composes and constructs nodes recursively: a file of a few thousand ``[`` reaches Python's recursion limit (a
``RecursionError`` traceback) after seconds of CPU. No configuration numawatch reads nests more than a handful of
levels, so composing stops at ``MAX_DEPTH`` with a ``yaml.YAMLError`` that the loaders turn into their usual one-line
"not valid YAML" error, after reading no more than the first ``MAX_DEPTH`` openings.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["MAX_DEPTH", "BoundedLoader", "NestingTooDeep"]

# The intent's deepest structure is about five levels (a pod's containers' resources); the web config's three.
MAX_DEPTH = 32


class NestingTooDeep(yaml.composer.ComposerError):
    """Collections nested deeper than ``MAX_DEPTH``."""


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses collections nested deeper than ``MAX_DEPTH``."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise NestingTooDeep(None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
