"""Translate the SAM template to plain CloudFormation offline, for ``cfn-lint`` (aws-notes section 10).

``cfn-lint`` on a SAM template only checks the ``AWS::Serverless::*`` resources against the SAM
schemas, so errors inside the expanded resources (a bad runtime, a timeout over 900 s, an invalid
Function URL invoke mode) go unnoticed. Expanding the template with ``samtranslator`` first and
linting the result catches them. Everything stays offline: the state machine definition is
inlined, local code folders become a placeholder S3 URI, and managed-policy names are not
resolved (no IAM call).

Usage (in the ``.venv-sam`` environment, with ``AWS_DEFAULT_REGION`` set)::

    python tests/deploy/sam_to_cfn.py template.yaml | cfn-lint -

``--parameters FILE`` (a JSON object of parameter values) makes those values the parameters'
defaults first, so that the checks see the template as deployed with them; ``--sam`` prints that
SAM template (for ``sam validate --lint``) instead of translating it. ``make deploy-checks`` runs
every check at the defaults and at ``tests/deploy/nondefault-parameters.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PLACEHOLDER_CODE = "s3://placeholder-bucket/placeholder.zip"


class NoIamPolicyLoader:
    """A managed-policy loader that knows no names, so the translator makes no IAM call."""

    def load(self) -> dict[str, str]:
        """No managed policies."""
        return {}


def with_defaults(template: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """``template`` with ``values`` as its parameters' defaults (each must be a declared parameter)."""
    declared = template["Parameters"]
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise SystemExit(f"not parameters of the template: {', '.join(unknown)}")
    for name, value in values.items():
        declared[name]["Default"] = value
    return template


def load_sam(template_path: str | Path, parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """The SAM template, with ``parameters`` as its defaults."""
    from samtranslator.yaml_helper import yaml_parse  # only in .venv-sam

    template: dict[str, Any] = yaml_parse(Path(template_path).read_text())
    return with_defaults(template, parameters or {})


def sam_to_cfn(
    template_path: str | Path, region: str = "us-east-1", parameters: dict[str, str] | None = None
) -> dict[str, Any]:
    """The CloudFormation template that SAM would deploy for ``template_path`` (with ``parameters``
    as the defaults)."""
    from samtranslator.translator.transform import transform  # only in .venv-sam

    path = Path(template_path)
    template = load_sam(path, parameters)
    for resource in template.get("Resources", {}).values():
        props = resource.get("Properties", {})
        if resource.get("Type") == "AWS::Serverless::StateMachine" and isinstance(props.get("DefinitionUri"), str):
            props["Definition"] = json.loads((path.parent / props.pop("DefinitionUri")).read_text())
        for key in ("CodeUri", "ContentUri"):
            if isinstance(props.get(key), str):
                props[key] = PLACEHOLDER_CODE
    params = {"AWS::Region": region, "AWS::AccountId": "123456789012", "AWS::Partition": "aws"}
    result: dict[str, Any] = transform(template, params, NoIamPolicyLoader())
    return result


def main(argv: list[str] | None = None) -> None:
    """Print the translated template as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template", nargs="?", default="template.yaml")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--parameters", help="a JSON file of parameter values to check the template with")
    parser.add_argument("--sam", action="store_true", help="print the SAM template with those defaults")
    args = parser.parse_args(argv)
    values = json.loads(Path(args.parameters).read_text()) if args.parameters else None
    out = load_sam(args.template, values) if args.sam else sam_to_cfn(args.template, args.region, values)
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
