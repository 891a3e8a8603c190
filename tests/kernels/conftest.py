"""The kernel tests run interpreted where there is no GPU: `tests/conftest.py` sets
TRITON_INTERPRET before anything imports triton (see its docstring for why that early)."""
