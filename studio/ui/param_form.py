"""A form generated from a pydantic model's JSON schema, with inline validation.

Booleans become check boxes, enums combo boxes, integers spin boxes, floats and
strings line edits, lists of strings comma-separated line edits; an optional
field gets a "set" toggle (unset = the default). Descriptions are tooltips. The
form emits ``changed(params)`` only with values the model accepts; an invalid
value is shown in red next to its field and never leaves the form.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from accel.jsonable import jsonable

_NO_VALUE = object()


class _Field:
    def __init__(
        self, name: str, prop: dict[str, Any], schema: dict[str, Any], default: Any, required: bool
    ):
        self.name = name
        self.default = default
        self.required = required
        variants = prop.get("anyOf") or [prop]
        self.nullable = any(v.get("type") == "null" for v in variants)
        main = next((v for v in variants if v.get("type") != "null"), {})
        if "$ref" in main:
            main = schema.get("$defs", {}).get(main["$ref"].rsplit("/", 1)[-1], {})
        self.kind = main.get("type", "string")
        self.enum = main.get("enum") or prop.get("enum")
        self.items = (main.get("items") or {}).get("type")
        self.minimum = main.get("minimum", main.get("exclusiveMinimum"))
        self.maximum = main.get("maximum", main.get("exclusiveMaximum"))
        self.editor: QWidget
        self.toggle: QCheckBox | None = None
        self.error = QLabel()
        self.error.setStyleSheet("color: #d03030;")
        self.error.setWordWrap(True)
        self.error.hide()


class ParamForm(QWidget):
    """Edit an instance of ``model_cls`` (a pydantic model) as a form."""

    changed = Signal(dict)  # params that validate (only the ones that differ from defaults)
    validityChanged = Signal(bool)  # the form became valid / invalid (while typing too)

    def __init__(
        self,
        model_cls: type[BaseModel],
        values: dict[str, Any] | None = None,
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.model_cls = model_cls
        self.schema = model_cls.model_json_schema()
        self.fields: dict[str, _Field] = {}
        self._loading = False
        self._valid = True
        layout = QFormLayout(self)
        layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        props = self.schema.get("properties", {})
        for name, f in model_cls.model_fields.items():
            key = f.alias or name
            prop = props.get(key, {})
            default = None if f.is_required() else f.get_default(call_default_factory=True)
            fld = _Field(key, prop, self.schema, default, f.is_required())
            fld.editor = self._make_editor(fld)
            tip = f.description or ""
            fld.editor.setToolTip(tip)
            row = QWidget()
            h = QHBoxLayout(row)
            h.setContentsMargins(0, 0, 0, 0)
            if fld.nullable and not fld.required:
                fld.toggle = QCheckBox()
                fld.toggle.setToolTip("set a value (unchecked: the default, none)")
                fld.toggle.toggled.connect(fld.editor.setEnabled)
                fld.toggle.toggled.connect(self._emit)
                h.addWidget(fld.toggle)
            h.addWidget(fld.editor, 1)
            label = QLabel(key.replace("_", " "))
            label.setToolTip(tip)
            layout.addRow(label, row)
            layout.addRow("", fld.error)
            self.fields[key] = fld
        self.set_values(values or {})

    # -- editors -------------------------------------------------------------------------
    def _make_editor(self, fld: _Field) -> QWidget:
        if fld.enum:
            w = QComboBox()
            for v in fld.enum:
                w.addItem(str(v), v)
            w.currentIndexChanged.connect(self._emit)
            return w
        if fld.kind == "boolean":
            w = QCheckBox()
            w.toggled.connect(self._emit)
            return w
        if fld.kind == "integer":
            w = QSpinBox()
            w.setRange(
                int(fld.minimum) if fld.minimum is not None else -(2**31),
                int(fld.maximum) if fld.maximum is not None else 2**31 - 1,
            )
            # Typed digits commit on Enter / focus-out, not one keystroke at a time.
            w.setKeyboardTracking(False)
            w.valueChanged.connect(self._emit)
            return w
        w = QLineEdit()
        if fld.kind == "array":
            w.setPlaceholderText("comma-separated")
        elif fld.kind == "object":
            w.setPlaceholderText("e.g. {batch: 8} (YAML or JSON)")
        # Validate while typing (errors show at once), commit on Enter / focus-out: a
        # half-typed value ("0.2" of "0.25") is never stored or run.
        w.textChanged.connect(self._check)
        w.editingFinished.connect(self._emit)
        return w

    def _set_editor(self, fld: _Field, value: Any) -> None:
        w = fld.editor
        if fld.toggle is not None:
            fld.toggle.setChecked(value is not None)
            w.setEnabled(value is not None)
        if value is None:
            value = (
                ""
                if not fld.enum and fld.kind not in ("boolean", "integer")
                else (fld.enum[0] if fld.enum else 0)
            )
        if isinstance(w, QComboBox):
            i = w.findData(value)
            w.setCurrentIndex(max(i, 0))
        elif isinstance(w, QCheckBox):
            w.setChecked(bool(value))
        elif isinstance(w, QSpinBox):
            w.setValue(int(value))
        elif isinstance(w, QLineEdit):
            if fld.kind == "array":
                w.setText(
                    ", ".join(str(v) for v in value)
                    if isinstance(value, (list, tuple))
                    else str(value)
                )
            elif fld.kind == "object":
                w.setText(json.dumps(value) if value not in ("", None) else "")
            else:
                w.setText("" if value is None else str(value))

    def _read_editor(self, fld: _Field) -> Any:
        if fld.toggle is not None and not fld.toggle.isChecked():
            return None
        w = fld.editor
        if isinstance(w, QComboBox):
            return w.currentData()
        if isinstance(w, QCheckBox):
            return w.isChecked()
        if isinstance(w, QSpinBox):
            return w.value()
        text = w.text().strip()
        if fld.kind == "array":
            items = [t.strip() for t in text.split(",") if t.strip()]
            if fld.items == "integer":
                return [int(t) if t.lstrip("-").isdigit() else t for t in items]
            return items
        if fld.kind == "object":
            return _parse_mapping(text)
        if fld.kind == "number":
            if text == "":
                return _NO_VALUE
            try:
                return float(text)
            except ValueError:
                return text  # pydantic reports it
        if text == "" and fld.kind == "string" and (fld.nullable or not fld.required):
            return None if fld.nullable else _NO_VALUE
        return text

    # -- values --------------------------------------------------------------------------
    def set_values(self, values: dict[str, Any]) -> None:
        self._loading = True
        try:
            for key, fld in self.fields.items():
                self._set_editor(fld, values.get(key, fld.default))
                fld.error.hide()
        finally:
            self._loading = False
        if not self._valid:
            self._valid = True
            self.validityChanged.emit(True)

    def raw_values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, fld in self.fields.items():
            try:
                v = self._read_editor(fld)
            except ValueError as exc:
                v = f"<invalid: {exc}>"
            if v is not _NO_VALUE:
                out[key] = v
        return out

    def validate(self) -> tuple[dict[str, Any] | None, dict[str, str]]:
        """(params that differ from defaults, or None if invalid; errors by field)."""
        raw = self.raw_values()
        try:
            obj = self.model_cls.model_validate(raw)
        except ValidationError as exc:
            errors: dict[str, str] = {}
            for e in exc.errors():
                key = str(e["loc"][0]) if e["loc"] else ""
                errors.setdefault(key, e["msg"].removeprefix("Value error, "))
            return None, errors
        dumped = obj.model_dump(mode="json", by_alias=True)
        params = {
            k: v for k, v in dumped.items() if k in raw and v != _jsonable(self.fields[k].default)
        }
        return params, {}

    def _check(self, *_: Any) -> dict[str, Any] | None:
        """Show the errors of what is typed now; returns the params when valid."""
        if self._loading:
            return None
        params, errors = self.validate()
        for key, fld in self.fields.items():
            if key in errors:
                fld.error.setText(errors[key])
                fld.error.show()
            else:
                fld.error.hide()
        valid = params is not None
        if valid != self._valid:
            self._valid = valid
            self.validityChanged.emit(valid)
        return params

    def _emit(self, *_: Any) -> None:
        params = self._check()
        if params is not None:
            self.changed.emit(params)

    def commit(self) -> bool:
        """Commit what is typed (as Enter would); False when the form is invalid."""
        self._emit()
        return self._valid

    def is_valid(self) -> bool:
        return self._valid

    def errors(self) -> dict[str, str]:
        return self.validate()[1]


def _parse_mapping(text: str) -> Any:
    """A mapping typed as YAML flow (``{batch: 4}``, as in recipes and the README) or
    JSON (``{"batch": 4}``, which is YAML too); raises ValueError with the reason."""
    if not text:
        return {}
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not a mapping like {{batch: 4}}: {exc}") from None
    return value


def _jsonable(v: Any) -> Any:
    return jsonable(v)
