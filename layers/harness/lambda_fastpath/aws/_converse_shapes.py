"""The shapes of Bedrock's ConverseStream events, as botocore's ``bedrock-runtime`` model defines them.

botocore parses each event's JSON payload by its model: it keeps only the members the model
defines (dropping, for example, the ``p`` padding Bedrock adds to every event), base64-decodes
blobs (``reasoningContent.redactedContent``, image bytes) and answers an unknown union member with
``{"SDK_UNKNOWN_MEMBER": {"name": ...}}``. The lite client parses them the same way from this
table, generated from the model of the botocore the harness pins (``botocore.__version__`` below);
``tests/lambda_fastpath/aws/test_converse_events.py`` regenerates it from the installed botocore and fails when they
differ, printing the new table.

Errors before the stream get the modelled error's fields too (``ERRORS``: its members, an
integer one marked ``name:integer``, which botocore's REST-JSON parser converts with ``int``).

``SHAPES`` maps a shape name to ``"<kind> ..."``: ``structure`` / ``union`` followed by its members
(``name`` for a value kept as it is: strings, numbers, booleans, documents, lists and maps of
those; ``name=Shape`` for a member of a shape in this table), ``list Shape``, ``map Shape`` (string
keys) or ``blob``.
"""

from __future__ import annotations

__all__ = ["BOTOCORE_VERSION", "ERRORS", "EVENTS", "EXCEPTIONS", "INPUT_MEMBERS", "RETRYABLE_ERRORS", "SHAPES"]

BOTOCORE_VERSION = "1.44.8"
"""The botocore whose model this table was generated from."""

INPUT_MEMBERS = frozenset(
    {
        "modelId",
        "messages",
        "system",
        "inferenceConfig",
        "toolConfig",
        "guardrailConfig",
        "projectIdentifier",
        "additionalModelRequestFields",
        "promptVariables",
        "additionalModelResponseFieldPaths",
        "requestMetadata",
        "performanceConfig",
        "serviceTier",
        "outputConfig",
    }
)
"""The keyword arguments of ``converse_stream`` (``modelId`` is required; it goes in the path)."""

ERRORS: dict[str, str] = {
    "AccessDeniedException": "message",
    "ConflictException": "message",
    "InternalServerException": "message",
    "ModelErrorException": "message originalStatusCode:integer resourceName",
    "ModelNotReadyException": "message",
    "ModelStreamErrorException": "message originalStatusCode:integer originalMessage",
    "ModelTimeoutException": "message",
    "ResourceNotFoundException": "message",
    "ServiceQuotaExceededException": "message",
    "ServiceUnavailableException": "message",
    "ThrottlingException": "message",
    "ValidationException": "message",
}
"""The service's modelled errors by code, with the members botocore adds to the error response."""

RETRYABLE_ERRORS = frozenset({"ModelNotReadyException"})
"""Errors the model marks ``retryable`` (botocore's standard mode retries them, whatever the status)."""

EVENTS: dict[str, str] = {
    "messageStart": "MessageStartEvent",
    "contentBlockStart": "ContentBlockStartEvent",
    "contentBlockDelta": "ContentBlockDeltaEvent",
    "contentBlockStop": "ContentBlockStopEvent",
    "messageStop": "MessageStopEvent",
    "metadata": "ConverseStreamMetadataEvent",
    "internalServerException": "InternalServerException",
    "modelStreamErrorException": "ModelStreamErrorException",
    "validationException": "ValidationException",
    "throttlingException": "ThrottlingException",
    "serviceUnavailableException": "ServiceUnavailableException",
}
"""The event (and exception) types of the stream, each with its shape."""

EXCEPTIONS = frozenset(
    {
        "internalServerException",
        "modelStreamErrorException",
        "serviceUnavailableException",
        "throttlingException",
        "validationException",
    }
)
"""The modelled exception events (``:message-type: exception``)."""

SHAPES: dict[str, str] = {
    "AppliedGuardrailDetails": "structure guardrailId guardrailVersion guardrailArn guardrailOrigin guardrailOwnership",
    "Blob": "blob",
    "CacheDetail": "structure ttl inputTokens",
    "CacheDetailsList": "list CacheDetail",
    "CitationLocation": (
        "union web=WebLocation documentChar=DocumentCharLocation documentPage=DocumentPageLocation "
        "documentChunk=DocumentChunkLocation searchResultLocation=SearchResultLocation"
    ),
    "CitationSourceContentDelta": "structure text",
    "CitationSourceContentListDelta": "list CitationSourceContentDelta",
    "CitationsDelta": "structure title source sourceContent=CitationSourceContentListDelta location=CitationLocation",
    "ContentBlockDelta": (
        "union text toolUse=ToolUseBlockDelta toolResult=ToolResultBlocksDelta "
        "reasoningContent=ReasoningContentBlockDelta citation=CitationsDelta image=ImageBlockDelta"
    ),
    "ContentBlockDeltaEvent": "structure delta=ContentBlockDelta contentBlockIndex",
    "ContentBlockStart": "union toolUse=ToolUseBlockStart toolResult=ToolResultBlockStart image=ImageBlockStart",
    "ContentBlockStartEvent": "structure start=ContentBlockStart contentBlockIndex",
    "ContentBlockStopEvent": "structure contentBlockIndex",
    "ConverseStreamMetadataEvent": (
        "structure usage=TokenUsage metrics=ConverseStreamMetrics trace=ConverseStreamTrace "
        "performanceConfig=PerformanceConfiguration serviceTier=ServiceTier"
    ),
    "ConverseStreamMetrics": "structure latencyMs",
    "ConverseStreamTrace": "structure guardrail=GuardrailTraceAssessment promptRouter=PromptRouterTrace",
    "DocumentCharLocation": "structure documentIndex start end",
    "DocumentChunkLocation": "structure documentIndex start end",
    "DocumentPageLocation": "structure documentIndex start end",
    "ErrorBlock": "structure message",
    "GuardrailAssessment": (
        "structure topicPolicy=GuardrailTopicPolicyAssessment contentPolicy=GuardrailContentPolicyAssessment "
        "wordPolicy=GuardrailWordPolicyAssessment "
        "sensitiveInformationPolicy=GuardrailSensitiveInformationPolicyAssessment "
        "contextualGroundingPolicy=GuardrailContextualGroundingPolicyAssessment "
        "automatedReasoningPolicy=GuardrailAutomatedReasoningPolicyAssessment "
        "invocationMetrics=GuardrailInvocationMetrics appliedGuardrailDetails=AppliedGuardrailDetails"
    ),
    "GuardrailAssessmentList": "list GuardrailAssessment",
    "GuardrailAssessmentListMap": "map GuardrailAssessmentList",
    "GuardrailAssessmentMap": "map GuardrailAssessment",
    "GuardrailAutomatedReasoningDifferenceScenarioList": "list GuardrailAutomatedReasoningScenario",
    "GuardrailAutomatedReasoningFinding": (
        "union valid=GuardrailAutomatedReasoningValidFinding invalid=GuardrailAutomatedReasoningInvalidFinding "
        "satisfiable=GuardrailAutomatedReasoningSatisfiableFinding "
        "impossible=GuardrailAutomatedReasoningImpossibleFinding "
        "translationAmbiguous=GuardrailAutomatedReasoningTranslationAmbiguousFinding "
        "tooComplex=GuardrailAutomatedReasoningTooComplexFinding "
        "noTranslations=GuardrailAutomatedReasoningNoTranslationsFinding"
    ),
    "GuardrailAutomatedReasoningFindingList": "list GuardrailAutomatedReasoningFinding",
    "GuardrailAutomatedReasoningImpossibleFinding": (
        "structure translation=GuardrailAutomatedReasoningTranslation "
        "contradictingRules=GuardrailAutomatedReasoningRuleList logicWarning=GuardrailAutomatedReasoningLogicWarning"
    ),
    "GuardrailAutomatedReasoningInputTextReference": "structure text",
    "GuardrailAutomatedReasoningInputTextReferenceList": "list GuardrailAutomatedReasoningInputTextReference",
    "GuardrailAutomatedReasoningInvalidFinding": (
        "structure translation=GuardrailAutomatedReasoningTranslation "
        "contradictingRules=GuardrailAutomatedReasoningRuleList logicWarning=GuardrailAutomatedReasoningLogicWarning"
    ),
    "GuardrailAutomatedReasoningLogicWarning": (
        "structure type premises=GuardrailAutomatedReasoningStatementList "
        "claims=GuardrailAutomatedReasoningStatementList"
    ),
    "GuardrailAutomatedReasoningNoTranslationsFinding": "structure",
    "GuardrailAutomatedReasoningPolicyAssessment": "structure findings=GuardrailAutomatedReasoningFindingList",
    "GuardrailAutomatedReasoningRule": "structure identifier policyVersionArn",
    "GuardrailAutomatedReasoningRuleList": "list GuardrailAutomatedReasoningRule",
    "GuardrailAutomatedReasoningSatisfiableFinding": (
        "structure translation=GuardrailAutomatedReasoningTranslation "
        "claimsTrueScenario=GuardrailAutomatedReasoningScenario "
        "claimsFalseScenario=GuardrailAutomatedReasoningScenario logicWarning=GuardrailAutomatedReasoningLogicWarning"
    ),
    "GuardrailAutomatedReasoningScenario": "structure statements=GuardrailAutomatedReasoningStatementList",
    "GuardrailAutomatedReasoningStatement": "structure logic naturalLanguage",
    "GuardrailAutomatedReasoningStatementList": "list GuardrailAutomatedReasoningStatement",
    "GuardrailAutomatedReasoningTooComplexFinding": "structure",
    "GuardrailAutomatedReasoningTranslation": (
        "structure premises=GuardrailAutomatedReasoningStatementList claims=GuardrailAutomatedReasoningStatementList "
        "untranslatedPremises=GuardrailAutomatedReasoningInputTextReferenceList "
        "untranslatedClaims=GuardrailAutomatedReasoningInputTextReferenceList confidence"
    ),
    "GuardrailAutomatedReasoningTranslationAmbiguousFinding": (
        "structure options=GuardrailAutomatedReasoningTranslationOptionList "
        "differenceScenarios=GuardrailAutomatedReasoningDifferenceScenarioList"
    ),
    "GuardrailAutomatedReasoningTranslationList": "list GuardrailAutomatedReasoningTranslation",
    "GuardrailAutomatedReasoningTranslationOption": "structure translations=GuardrailAutomatedReasoningTranslationList",
    "GuardrailAutomatedReasoningTranslationOptionList": "list GuardrailAutomatedReasoningTranslationOption",
    "GuardrailAutomatedReasoningValidFinding": (
        "structure translation=GuardrailAutomatedReasoningTranslation "
        "claimsTrueScenario=GuardrailAutomatedReasoningScenario supportingRules=GuardrailAutomatedReasoningRuleList "
        "logicWarning=GuardrailAutomatedReasoningLogicWarning"
    ),
    "GuardrailContentFilter": "structure type confidence filterStrength action detected",
    "GuardrailContentFilterList": "list GuardrailContentFilter",
    "GuardrailContentPolicyAssessment": "structure filters=GuardrailContentFilterList",
    "GuardrailContextualGroundingFilter": "structure type threshold score action detected",
    "GuardrailContextualGroundingFilters": "list GuardrailContextualGroundingFilter",
    "GuardrailContextualGroundingPolicyAssessment": "structure filters=GuardrailContextualGroundingFilters",
    "GuardrailCoverage": "structure textCharacters=GuardrailTextCharactersCoverage images=GuardrailImageCoverage",
    "GuardrailCustomWord": "structure match action detected",
    "GuardrailCustomWordList": "list GuardrailCustomWord",
    "GuardrailImageCoverage": "structure guarded total",
    "GuardrailInvocationMetrics": (
        "structure guardrailProcessingLatency usage=GuardrailUsage guardrailCoverage=GuardrailCoverage"
    ),
    "GuardrailManagedWord": "structure match type action detected",
    "GuardrailManagedWordList": "list GuardrailManagedWord",
    "GuardrailPiiEntityFilter": "structure match type action detected",
    "GuardrailPiiEntityFilterList": "list GuardrailPiiEntityFilter",
    "GuardrailRegexFilter": "structure name match regex action detected",
    "GuardrailRegexFilterList": "list GuardrailRegexFilter",
    "GuardrailSensitiveInformationPolicyAssessment": (
        "structure piiEntities=GuardrailPiiEntityFilterList regexes=GuardrailRegexFilterList"
    ),
    "GuardrailTextCharactersCoverage": "structure guarded total",
    "GuardrailTopic": "structure name type action detected",
    "GuardrailTopicList": "list GuardrailTopic",
    "GuardrailTopicPolicyAssessment": "structure topics=GuardrailTopicList",
    "GuardrailTraceAssessment": (
        "structure modelOutput inputAssessment=GuardrailAssessmentMap outputAssessments=GuardrailAssessmentListMap "
        "actionReason"
    ),
    "GuardrailUsage": (
        "structure topicPolicyUnits contentPolicyUnits wordPolicyUnits sensitiveInformationPolicyUnits "
        "sensitiveInformationPolicyFreeUnits contextualGroundingPolicyUnits contentPolicyImageUnits "
        "automatedReasoningPolicyUnits automatedReasoningPolicies"
    ),
    "GuardrailWordPolicyAssessment": (
        "structure customWords=GuardrailCustomWordList managedWordLists=GuardrailManagedWordList"
    ),
    "ImageBlockDelta": "structure source=ImageSource error=ErrorBlock",
    "ImageBlockStart": "structure format",
    "ImageSource": "union bytes=ImageSourceBytesBlob s3Location=S3Location",
    "ImageSourceBytesBlob": "blob",
    "InternalServerException": "structure message",
    "MessageStartEvent": "structure role",
    "MessageStopEvent": "structure stopReason additionalModelResponseFields",
    "ModelStreamErrorException": "structure message originalStatusCode originalMessage",
    "PerformanceConfiguration": "structure latency",
    "PromptRouterTrace": "structure invokedModelId",
    "ReasoningContentBlockDelta": "union text redactedContent=Blob signature",
    "S3Location": "structure uri bucketOwner",
    "SearchResultLocation": "structure searchResultIndex start end",
    "ServiceTier": "structure type",
    "ServiceUnavailableException": "structure message",
    "ThrottlingException": "structure message",
    "TokenUsage": (
        "structure inputTokens outputTokens totalTokens cacheReadInputTokens cacheWriteInputTokens "
        "cacheDetails=CacheDetailsList"
    ),
    "ToolResultBlockDelta": "union text json",
    "ToolResultBlockStart": "structure toolUseId type status",
    "ToolResultBlocksDelta": "list ToolResultBlockDelta",
    "ToolUseBlockDelta": "structure input",
    "ToolUseBlockStart": "structure toolUseId name type",
    "ValidationException": "structure message",
    "WebLocation": "structure url domain",
}
"""Every shape an event reaches, by name (see the module docstring)."""
