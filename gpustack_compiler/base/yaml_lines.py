"""Safe YAML loading that remembers where every key and list item came from.

Only the safe loader is used (catalog files arrive in pull requests). Anchors and aliases are
refused because a shared node expands multiplicatively in every later walk (billion laughs).
"""

from __future__ import annotations

from collections.abc import Hashable

import yaml

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LinedDict(dict):
    """A mapping with the 1-based line of the mapping itself and of each key."""

    line: int = 1
    key_lines: dict

    def line_of(self, key) -> int:
        return self.key_lines.get(key, self.line)


class LinedList(list):
    line: int = 1
    item_lines: list

    def line_of(self, index: int) -> int:
        if isinstance(index, int) and 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


class YamlError(Exception):
    def __init__(self, message: str, line: int, column: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column

    def __reduce__(self):
        # sent back from a forked parser (gpustack_compiler.base.forked)
        return YamlError, (self.message, self.line, self.column)


class _Loader(_Base):
    def __init__(self, stream):
        super().__init__(stream)
        self.duplicates: list[tuple[str, int]] = []
        self._tags: dict = {}

    def resolve(self, kind, value, implicit):
        # The implicit-tag regexes run in Python for every scalar; a catalog file repeats most of its
        # scalars (keys, units, references), so each distinct one is resolved once.
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        tag = self._tags.get(key)
        if tag is None:
            tag = self._tags[key] = super().resolve(kind, value, implicit)
        return tag

    def construct_object(self, node, deep=False):
        if node in self.constructed_objects or node in self.recursive_objects:
            raise YamlError("anchors and aliases are not allowed in catalog files",
                            node.start_mark.line + 1, node.start_mark.column + 1)
        try:
            return super().construct_object(node, deep=True)
        except (YamlError, yaml.YAMLError, RecursionError, MemoryError):
            raise
        except Exception as exc:
            # The safe constructors of tagged scalars (`!!timestamp nope`, `!!int 0x`, `!!binary %`) fail
            # with the errors of the parsers they call, not a YAMLError: each is a problem of this node.
            raise YamlError(f"YAML syntax: cannot read {node.tag} value {str(node.value)[:40]!r} "
                            f"({type(exc).__name__})", node.start_mark.line + 1,
                            node.start_mark.column + 1) from None


def _construct_mapping(loader: _Loader, node):
    loader.flatten_mapping(node)
    out = LinedDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, Hashable):
            raise YamlError("mapping key is not a scalar", key_node.start_mark.line + 1)
        line = key_node.start_mark.line + 1
        if key in out:
            loader.duplicates.append((str(key), line))
        out[key] = loader.construct_object(value_node)
        out.key_lines[key] = line
    return out


def _construct_sequence(loader: _Loader, node):
    out = LinedList()
    out.line = node.start_mark.line + 1
    out.item_lines = []
    for child in node.value:
        out.append(loader.construct_object(child))
        out.item_lines.append(child.start_mark.line + 1)
    return out


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)


# Deeper nesting is refused before composing: libyaml's composer recurses in C, and a flow collection
# nested some 20,000 deep (two bytes a level) crashes the interpreter instead of raising RecursionError.
MAX_DEPTH = 500


def _check_depth(text: str) -> None:
    """YamlError when collections nest deeper than MAX_DEPTH. Only a text with more flow openings than that
    can nest deep enough to matter (block nesting needs a level of indentation more per level: the size
    limits of gpustack_compiler/base/limits.py keep it to about 2,000), so only such a text pays for walking the
    parser's events, which keep their stack on the heap."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Base):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlError(f"YAML nesting deeper than {MAX_DEPTH} levels", event.start_mark.line + 1,
                                    event.start_mark.column + 1)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return  # a syntax error: the loader reports it with its line


def load(text: str):
    """Parse YAML text; return (data, duplicate keys as (key, line)). Raises YamlError."""
    _check_depth(text)
    loader = _Loader(text)
    try:
        data = loader.get_single_data()
    except YamlError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        col = mark.column + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlError(f"YAML syntax: {problem}", line, col) from None
    except yaml.YAMLError as exc:
        raise YamlError(f"YAML syntax: {exc}", 1) from None
    except RecursionError:
        raise YamlError("YAML nesting too deep", 1) from None
    finally:
        loader.dispose()
    return data, loader.duplicates


def load_or_error(text: str):
    """`load(text)`, or the YamlError it raised."""
    try:
        return load(text)
    except YamlError as exc:
        return exc


def line_at(data, loc: tuple) -> int:
    """The line of the deepest element of `loc` (a pydantic error location) found in `data`."""
    line = getattr(data, "line", 1)
    node = data
    for part in loc:
        if isinstance(node, LinedDict) and part in node:
            line = node.line_of(part)
            node = node[part]
        elif isinstance(node, LinedList) and isinstance(part, int) and 0 <= part < len(node):
            line = node.line_of(part)
            node = node[part]
        # Parts that name a union member (the relation kind) do not exist in the data.
    return line
