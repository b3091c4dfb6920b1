"""The error answers every operation can really give, written into the published schema.

Handlers list their own answers (404 for an unknown id, 413 and 429 on ingest...); the ones that
come from the shared machinery are added here, once, from what each operation is made of:
422 when it has parameters or a body (ninja's validation), 400 for a body that is not JSON,
401 when it needs a key or a login, 403 and 404 for a member's role, CSRF check and project,
503 with Retry-After when the database is unreachable.
"""

from __future__ import annotations

from typing import Any

from core.auth import IngestKeyAuth, ProjectReadAuth

_DETAIL = {
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}
_VALIDATION = {
    "type": "object",
    "properties": {
        "detail": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "loc": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                    "msg": {"type": "string"},
                    "type": {"type": "string"},
                },
                "required": ["loc", "msg"],
            },
        }
    },
    "required": ["detail"],
}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}}


def _answer(description: str, schema: dict[str, Any], headers: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        out["headers"] = headers
    return out


def add_error_responses(api: Any, schema: dict[str, Any]) -> None:
    """Add the shared error answers to each operation of SCHEMA (API's published schema)."""
    operations = {}
    for bound in api._get_bound_routers():
        for view in bound.path_operations.values():
            for op in view.operations:
                operations[op.operation_id or api.get_openapi_operation_id(op)] = op
    for methods in schema.get("paths", {}).values():
        for method, spec in methods.items():
            op = operations.get(spec.get("operationId"))
            # ninja keys responses by int; the document's keys are strings.
            responses = {str(k): v for k, v in spec.get("responses", {}).items()}
            spec["responses"] = responses
            extra: dict[str, dict[str, Any]] = {}
            if spec.get("parameters") or "requestBody" in spec:
                extra["422"] = _answer("a parameter or the body is invalid (each error names its field)",
                                       _VALIDATION)
            if "requestBody" in spec:
                extra["400"] = _answer("the body is not valid JSON", _DETAIL)
            auths = list(op.auth_callbacks) if op is not None else []
            if auths:
                extra["401"] = _answer("missing, unknown or revoked ingest key, or not signed in", _DETAIL)
            for auth in auths:
                if isinstance(auth, ProjectReadAuth):
                    extra["404"] = _answer("no such project (a member's ?project=), or no such item", _DETAIL)
                    if auth.role != "viewer" or auth.keys_refused or method.upper() not in ("GET", "HEAD"):
                        extra["403"] = _answer("role too low, ingest key refused, or CSRF check failed",
                                               _DETAIL)
                elif not isinstance(auth, IngestKeyAuth):
                    extra["403"] = _answer("not allowed", _DETAIL)
            extra["503"] = _answer("the database is unreachable; retry after Retry-After seconds", _DETAIL,
                                   _RETRY_AFTER)
            for status, answer in extra.items():
                responses.setdefault(status, answer)
            for status in ("429", "503"):
                if status in responses:
                    responses[status].setdefault("headers", _RETRY_AFTER)
