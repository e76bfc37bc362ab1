"""What to do when Bedrock refuses a model call for lack of access (issue 22).

A refused call's own message can name the account, the role and its session (``User:
arn:aws:sts::<account>:assumed-role/...``), which the client must not see, and it rarely says
what to do. :func:`access_advice` replaces it with the step that fixes the cause, chosen by what
the message says:

* the first call of a third-party model starts an AWS Marketplace subscription, which needs
  ``aws-marketplace:Subscribe``, ``Unsubscribe`` and ``ViewSubscriptions`` on the calling role and
  a payment method for Marketplace purchases on the account;
* Anthropic's models need the one-time use-case form (per account, or the organization's
  management account);
* the role may not invoke the model, or the model (or inference profile) is not offered in the
  Region.

The "Model access" section of docs/deploying.md lists the same steps.
"""

from __future__ import annotations

__all__ = ["access_advice"]

_SUBSCRIPTION = (
    "Bedrock refused the model call: this account's AWS Marketplace subscription to the model is missing and "
    "could not be started. The stack's roles have the Marketplace permissions it needs (redeploy if they were "
    "removed); check that the account has a valid payment method for Marketplace purchases, then try again in "
    "15 minutes (docs/deploying.md, Model access)."
)
_USE_CASE = (
    "Bedrock refused the model call: Anthropic models need the one-time use case form. Submit it in the Amazon "
    "Bedrock console (Model catalog, choose the Anthropic model, submit the use case details) for this account or "
    "the organization's management account, then try again in 15 minutes (docs/deploying.md, Model access)."
)
_PERMISSION = (
    "Bedrock refused the model call: the function's role may not invoke this model (bedrock:InvokeModel, "
    "bedrock:InvokeModelWithResponseStream). Check the ModelId parameter (a model or inference profile id "
    "offered in this Region) and the stack's InvokeBedrockModels permissions (docs/deploying.md, Model access)."
)
_NO_MODEL = (
    "Bedrock refused the model call: this account has no access to the model in this Region. Check the ModelId "
    "parameter (a model or inference profile id offered in this Region) and the model's page in the Amazon "
    "Bedrock console's Model catalog (docs/deploying.md, Model access)."
)


def access_advice(code: str, message: str) -> str | None:
    """The client's text for a call Bedrock refused with ``code`` and ``message`` (``None``: not
    an access problem; the message is then shown as it is)."""
    text = message.lower()
    if "use case" in text:  # ResourceNotFoundException or AccessDeniedException, by model
        return _USE_CASE
    if code != "AccessDeniedException":
        return None
    if "marketplace" in text or "subscription" in text or "payment" in text:
        return _SUBSCRIPTION
    if "not authorized to perform" in text:
        return _PERMISSION
    return _NO_MODEL
