"""Working-memory write semantics: template mode (replace) and schema mode (merge). Pure.

Template mode stores Markdown and replaces the whole document. A write that equals the
template (whitespace collapsed) over existing data that is not itself the template is
refused (:class:`~signals.errors.EmptyTemplateOverwriteError`): that is how a model
"clears" memory by accident, and Mastra refuses it too.

Schema mode stores JSON and merges (:func:`~signals.core.merge.deep_merge`: objects
deep-merge, ``null`` deletes, arrays replace). The merged document is validated against
the user's schema, a pydantic model class or a JSON Schema dict; a failure names every
failing field and nothing is stored. A merge update must be plain JSON, at most
:data:`~signals.core.merge.MAX_DEPTH` (64) objects/arrays deep: NaN, infinities, bytes, sets,
tuples, non-string keys and lone surrogates are refused with the path of the bad value
(see :func:`~signals.core.merge.check_json_value`), never stored as something else.
Documents are serialised as compact JSON in key order, integral floats printed as
integers (what ``JSON.stringify`` gives).

Every document is checked against the configured size limit (UTF-8 bytes), and must be
UTF-8 text: a ``str`` with lone surrogates (undecodable bytes smuggled in with
``surrogateescape``) is refused with :class:`~signals.errors.InvalidInputError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec
import pydantic
from jsonschema import Draft202012Validator

from signals.core.cachekey import js_trim
from signals.core.codec import decode_json, encode_json
from signals.core.merge import check_json_value, deep_merge, normalise_numbers
from signals.core.models import Format, Scope
from signals.errors import (
    CorruptDataError,
    DocumentTooLargeError,
    EmptyTemplateOverwriteError,
    InvalidInputError,
    SchemaValidationError,
)

__all__ = (
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TEMPLATE",
    "MAX_DOCUMENT_CHARS",
    "MAX_EVENT_CHARS",
    "Schema",
    "WorkingMemoryConfig",
    "apply_merge",
    "apply_replace",
    "check_size",
    "json_schema_of",
    "parse_merge_input",
)

#: Mastra's default working-memory template (``Memory.defaultWorkingMemoryTemplate``).
DEFAULT_TEMPLATE = """
# User Information
- **First Name**: 
- **Last Name**: 
- **Location**: 
- **Occupation**: 
- **Interests**: 
- **Goals**: 
- **Events**: 
- **Facts**: 
- **Projects**: 
"""
DEFAULT_MAX_BYTES = 64 * 1024
#: The largest document any reader takes, in characters: a writer's ``max_bytes`` is its
#: own client's setting, so what is stored may be larger. Workers refuse (dead-letter) a
#: document or write event over it; the system-message delivery refuses to read one.
MAX_DOCUMENT_CHARS = 4 * 1024 * 1024
#: The largest write event a worker takes: its JSON, in characters (the document with its
#: escapes, and the event's other fields). Writers refuse a write whose event would be
#: larger, whatever their own ``max_bytes``: no worker would signal it.
MAX_EVENT_CHARS = MAX_DOCUMENT_CHARS

Schema = type[pydantic.BaseModel] | dict[str, Any]


@dataclass(frozen=True, slots=True)
class WorkingMemoryConfig:
    """How a lane's working memory is shaped.

    Attributes:
        scope: ``resource`` (one document per user, the default) or ``thread``.
        template: the Markdown template (template mode); ignored when ``schema`` is set.
        schema: a pydantic model class or a JSON Schema dict: schema mode (JSON, merge).
        max_bytes: the largest document accepted, in UTF-8 bytes.
    """

    scope: Scope = "resource"
    template: str | None = DEFAULT_TEMPLATE
    schema: Schema | None = None
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.scope not in ("resource", "thread"):
            raise InvalidInputError(f"unknown scope {self.scope!r}: use 'resource' or 'thread'")
        if self.max_bytes <= 0:
            raise InvalidInputError("max_bytes must be positive")

    @property
    def format(self) -> Format:
        """``json`` in schema mode, else ``markdown``."""
        return "json" if self.schema is not None else "markdown"


def _words(text: str) -> list[str]:
    """The text's words: equal for two texts exactly when their whitespace-collapsed forms are."""
    return text.split()


def check_size(text: str, max_bytes: int) -> None:
    """Refuse a document over ``max_bytes`` UTF-8 bytes."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise DocumentTooLargeError(
            f"working memory is {size} bytes, over the limit of {max_bytes} bytes"
        )


def template_text(new: object) -> str:
    """``new`` as a template-mode document's text; raises :class:`InvalidInputError` when
    it is not a string."""
    if not isinstance(new, str):
        raise InvalidInputError("template-mode working memory must be a string")
    return new


def apply_replace(existing: str | None, new: str, config: WorkingMemoryConfig) -> str:
    """Template mode: the new document, after the empty-template and blank guards and the
    size check (a blank write over existing data is refused as the empty template is)."""
    new = template_text(new)
    try:
        new.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInputError(
            f"working memory is not valid UTF-8 text (a lone surrogate at position {e.start})"
        ) from e
    if existing and config.template:
        template = _words(config.template)
        if _words(new) == template and _words(existing) != template:
            raise EmptyTemplateOverwriteError(
                "refused: the write equals the empty template and would erase existing "
                "working memory"
            )
    if not js_trim(new):
        # blank data is no signal (Mastra's rule): over memory, the model would keep the text it
        # holds, and a new window would be given the last snapshot, of memory the write reported
        # as erased; on a new lane, the lane would hold a document no signal ever shows (replay
        # would take it for writes no worker had processed)
        if existing and js_trim(existing):
            raise EmptyTemplateOverwriteError(
                "refused: the write is blank and would erase existing working memory (no signal carries "
                "a blank memory, so the model would keep the text it holds); to clear it, write a document that "
                "says it is empty")
        raise InvalidInputError("refused: the write is blank (no signal carries a blank memory, so no model "
                                "would ever see it); write the memory's text, or nothing")
    check_size(new, config.max_bytes)
    return new


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)


def lone_surrogate_escape(text: str) -> str | None:
    """The first ``\\uD800``-``\\uDFFF`` escape in JSON text that is not half of a surrogate
    pair (JSON allows it, UTF-8 cannot carry it), or ``None``. Escaped backslashes are
    skipped, so ``"\\\\ud800"`` (a backslash, then ``ud800``) is not one."""
    pending: str | None = None  # a high surrogate escape waiting for its low half
    last_end = -1
    for m in _ESCAPE.finditer(text):
        esc = m.group(1)
        code = int(esc[1:], 16) if esc[0] == "u" and len(esc) == 5 else None
        adjacent = m.start() == last_end
        if pending is not None and not (adjacent and code is not None and 0xDC00 <= code <= 0xDFFF):
            return pending
        if pending is not None:
            pending = None
        elif code is not None and 0xD800 <= code <= 0xDBFF:
            pending = m.group(0)
        elif code is not None and 0xDC00 <= code <= 0xDFFF:
            return m.group(0)
        last_end = m.end()
    return pending


def parse_merge_input(update: str | dict[str, Any]) -> dict[str, Any]:
    """Accept a merge update as a dict or JSON text; it must be a plain JSON object.

    Raises:
        InvalidInputError: not JSON, not an object, or holding a value JSON cannot
            represent exactly, or nested too deeply (see :func:`check_json_value`).
    """
    if isinstance(update, str):
        text = update
        try:
            update = decode_json(text)
        except msgspec.DecodeError as e:
            lone = lone_surrogate_escape(text)
            if lone is not None:  # msgspec reports these as "Input data was truncated"
                raise InvalidInputError(
                    f"merge input holds the escape {lone} at character {text.index(lone)}: a lone "
                    "surrogate (half of a UTF-16 pair) has no UTF-8 form and cannot be stored") from e
            if not text.strip():  # msgspec says "Input data was truncated" of no text at all
                raise InvalidInputError("merge input is empty: a merge takes a JSON object") from e
            raise InvalidInputError(f"merge input is not valid JSON: {e}") from e
    if not isinstance(update, dict):
        raise InvalidInputError(
            f"merge input must be a JSON object, got {type(update).__name__}"
        )
    check_json_value(update)
    return update


def apply_merge(
    existing: str | None, update: str | dict[str, Any], config: WorkingMemoryConfig
) -> str:
    """Schema mode: merge ``update`` into ``existing``, validate, serialise, size-check."""
    patch = parse_merge_input(update)
    current: Any = None
    if existing:
        try:
            current = decode_json(existing)
            check_json_value(current, what="stored working memory")
        except msgspec.DecodeError as e:
            raise CorruptDataError(f"stored working memory is not JSON: {e}") from e
        except InvalidInputError as e:
            raise CorruptDataError(str(e)) from e
    merged = normalise_numbers(deep_merge(current, patch))
    if config.schema is not None:
        _validate(merged, config.schema)
    text = encode_json(merged)
    check_size(text, config.max_bytes)
    return text


def _validate(document: dict[str, Any], schema: Schema) -> None:
    if isinstance(schema, dict):
        errors = sorted(Draft202012Validator(schema).iter_errors(document), key=lambda e: list(e.path))
        if errors:
            fields = tuple(".".join(str(p) for p in e.absolute_path) or "(root)" for e in errors)
            detail = "; ".join(f"{f}: {e.message}" for f, e in zip(fields, errors, strict=True))
            raise SchemaValidationError(f"working memory fails its schema: {detail}", fields)
        return
    try:
        schema.model_validate(document)
    except pydantic.ValidationError as e:
        fields = tuple(".".join(str(p) for p in err["loc"]) or "(root)" for err in e.errors())
        detail = "; ".join(
            f"{f}: {err['msg']}" for f, err in zip(fields, e.errors(), strict=True)
        )
        raise SchemaValidationError(f"working memory fails its schema: {detail}", fields) from e


def json_schema_of(schema: Schema) -> dict[str, Any]:
    """The JSON Schema of a schema (a pydantic model's, or the dict itself)."""
    if isinstance(schema, dict):
        return schema
    return schema.model_json_schema()
