"""A small expression calculator: tokenizer, Pratt parser, evaluator and RPN conversion."""

from .evaluator import CalcEvalError, CalcNameError, dump, evaluate, to_rpn
from .parser import parse
from .tokens import CalcError, CalcSyntaxError, tokenize

__all__ = [
    "CalcError",
    "CalcEvalError",
    "CalcNameError",
    "CalcSyntaxError",
    "dump",
    "evaluate",
    "parse",
    "to_rpn",
    "tokenize",
]
