"""Exceptions; every error carries the template line it refers to."""


class TemplateError(Exception):
    """Base class. The line is an attribute for tools and part of the message for people."""

    def __init__(self, message: str, lineno: int | None = None) -> None:
        self.message = message
        self.lineno = lineno
        super().__init__(f"line {lineno}: {message}" if lineno is not None else message)


class TemplateSyntaxError(TemplateError):
    """The template source is malformed; raised while compiling."""


class TemplateRuntimeError(TemplateError):
    """The template compiled but could not be rendered with the given context."""
