"""The error answer of vLLM's OpenAI-compatible server: `{"error": {"message", "type", "param",
"code"}}`, with vLLM's wording for validation failures (`bad_request`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["ApiError", "ErrorBody", "ErrorInfo", "bad_request"]

_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "RequestTooLargeError",
    429: "RateLimitError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorBody(BaseModel):
    """vLLM's (and OpenAI's) error body."""

    error: ErrorInfo


class ApiError(Exception):
    """An error the server answers with; `param` names the bad field (dotted path)."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    @property
    def error_type(self) -> str:
        fallback = "InternalServerError" if self.status >= 500 else "BadRequestError"
        return _ERROR_TYPES.get(self.status, fallback)

    def body(self) -> dict[str, Any]:
        info = ErrorInfo(
            message=self.message, type=self.error_type, param=self.param, code=self.status
        )
        return ErrorBody(error=info).model_dump()


def bad_request(message: str, param: str, value: Any = None) -> ApiError:
    """A 400 worded as vLLM's `VLLMValidationError`: message, then `(parameter=, value=)`."""
    extras = [f"parameter={param}"] + ([] if value is None else [f"value={value}"])
    return ApiError(400, f"{message} ({', '.join(extras)})", param)
