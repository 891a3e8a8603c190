"""minitemplate: a small, auto-escaping template engine for HTML and text."""

from .errors import TemplateError, TemplateRuntimeError, TemplateSyntaxError
from .filters import Markup, escape
from .template import Template, tokenize

__all__ = [
    "Markup",
    "Template",
    "TemplateError",
    "TemplateRuntimeError",
    "TemplateSyntaxError",
    "escape",
    "tokenize",
]
