"""Reading ``template.yaml`` as CloudFormation would, for the deploy tests (no SAM CLI needed).

* :func:`load_template` parses YAML with CloudFormation's short tags (``!Ref``, ``!Sub``, ``!If``,
  ...) turned into their long JSON forms (``{"Ref": ...}``, ``{"Fn::Sub": ...}``).
* :class:`Resolver` evaluates parameters (defaults and overrides), conditions and the intrinsic
  functions the template uses, against the physical names of the resources a test created.
* :func:`function_properties` merges a function's properties over the ``Globals`` section, the
  way SAM does (maps merge, lists append, scalars override).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"


class NoValue:
    """``AWS::NoValue``: the property (or list item) disappears."""

    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE = NoValue()


class CfnLoader(yaml.SafeLoader):
    """A safe YAML loader that understands CloudFormation's short-form intrinsic tags."""


def _construct_tag(loader: CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "Condition":
        return {"Condition": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


CfnLoader.add_multi_constructor("!", _construct_tag)


def load_template(path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """The template as plain data, intrinsics in their long form."""
    data: dict[str, Any] = yaml.load(path.read_text(), Loader=CfnLoader)
    return data


def function_properties(template: Mapping[str, Any], logical_id: str) -> dict[str, Any]:
    """A serverless function's properties merged over ``Globals.Function`` as SAM merges them."""
    globals_ = template.get("Globals", {}).get("Function", {})
    return _merge(globals_, template["Resources"][logical_id].get("Properties", {}))


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict) and not _is_intrinsic(override):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = _merge(base[key], value) if key in base else value
        return merged
    if isinstance(base, list) and isinstance(override, list):
        return base + override
    return override


def _is_intrinsic(value: Mapping[str, Any]) -> bool:
    return len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref", "Condition"))


_SUB_VAR = re.compile(r"\$\{([^}!]+)\}")


class Resolver:
    """Evaluates parameters, conditions and intrinsic functions of one "deployed" template.

    ``physical`` maps logical ids to what ``Ref`` returns (table name, bucket name, function name,
    state machine ARN, ...); ``attributes`` maps ``(logical id, attribute)`` to what ``GetAtt``
    returns.
    """

    def __init__(
        self,
        template: Mapping[str, Any],
        overrides: Mapping[str, str] | None = None,
        *,
        region: str = "us-east-1",
        account: str = "123456789012",
        stack_name: str = "durable-harness",
        partition: str = "aws",
    ) -> None:
        self.template = template
        self.pseudo = {
            "AWS::Region": region,
            "AWS::AccountId": account,
            "AWS::Partition": partition,
            "AWS::StackName": stack_name,
            "AWS::StackId": f"arn:{partition}:cloudformation:{region}:{account}:stack/{stack_name}/"
            "0123abcd-4567-89ef-0123-456789abcdef",
            "AWS::URLSuffix": "amazonaws.com",
        }
        declared = template.get("Parameters", {})
        unknown = set(overrides or {}) - set(declared)
        if unknown:
            raise KeyError(f"unknown parameters: {sorted(unknown)}")
        self.parameters: dict[str, Any] = {}
        for name, spec in declared.items():
            raw = (overrides or {}).get(name, spec.get("Default"))
            if raw is None:
                raise KeyError(f"parameter {name} has no default and no override")
            raw = str(raw)
            self.parameters[name] = [p.strip() for p in raw.split(",")] if spec["Type"] == "CommaDelimitedList" else raw
        self.physical: dict[str, str] = {}
        self.attributes: dict[tuple[str, str], str] = {}
        self._conditions: dict[str, bool] = {}

    # --- conditions ------------------------------------------------------------------------------

    def condition(self, name: str) -> bool:
        """The value of a named condition."""
        if name not in self._conditions:
            self._conditions[name] = bool(self.resolve(self.template["Conditions"][name]))
        return self._conditions[name]

    def exists(self, logical_id: str) -> bool:
        """True when the resource's ``Condition`` (if any) holds."""
        condition = self.template["Resources"][logical_id].get("Condition")
        return condition is None or self.condition(condition)

    # --- intrinsics ------------------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic evaluated; ``NO_VALUE`` entries are dropped."""
        if isinstance(value, list):
            resolved = [self.resolve(v) for v in value]
            return [v for v in resolved if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            handler = getattr(self, "_" + key.replace("Fn::", "fn_").replace("::", "_"), None)
            if handler is not None and (key.startswith("Fn::") or key in ("Ref", "Condition")):
                return handler(arg)
        items = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in items.items() if v is not NO_VALUE}

    def _Ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in self.physical:
            return self.physical[name]
        raise KeyError(f"Ref {name}: not a parameter, pseudo parameter or created resource")

    def _Condition(self, name: str) -> bool:
        return self.condition(name)

    def _fn_GetAtt(self, arg: list[str]) -> str:
        key = (arg[0], arg[1])
        if key not in self.attributes:
            raise KeyError(f"GetAtt {arg[0]}.{arg[1]}: not known")
        return self.attributes[key]

    def _fn_Sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(variables[name])
            if "." in name:
                logical, attribute = name.split(".", 1)
                return str(self._fn_GetAtt([logical, attribute]))
            return str(self._Ref(name))

        return _SUB_VAR.sub(substitute, text)

    def _fn_FindInMap(self, arg: list[Any]) -> Any:
        name, top, second = (str(self.resolve(a)) for a in arg)
        try:
            return self.template["Mappings"][name][top][second]
        except KeyError:  # what CloudFormation refuses the template with
            raise KeyError(f"Unable to get mapping for {name}::{top}::{second}") from None

    def _fn_If(self, arg: list[Any]) -> Any:
        return self.resolve(arg[1] if self.condition(arg[0]) else arg[2])

    def _fn_Equals(self, arg: list[Any]) -> bool:
        left, right = self.resolve(arg[0]), self.resolve(arg[1])
        return str(left) == str(right)

    def _fn_Not(self, arg: list[Any]) -> bool:
        return not self.resolve(arg[0])

    def _fn_And(self, arg: list[Any]) -> bool:
        return all(self.resolve(a) for a in arg)

    def _fn_Or(self, arg: list[Any]) -> bool:
        return any(self.resolve(a) for a in arg)

    def _fn_Join(self, arg: list[Any]) -> str:
        return str(arg[0]).join(str(v) for v in self.resolve(arg[1]))

    def _fn_Select(self, arg: list[Any]) -> Any:
        return self.resolve(arg[1])[int(self.resolve(arg[0]))]

    def _fn_Split(self, arg: list[Any]) -> list[str]:
        return str(self.resolve(arg[1])).split(str(arg[0]))
