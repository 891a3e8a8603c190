"""The policy's tokenizer: a byte-level BPE trained on the bundled code and tasks.

Byte-level means every string, whatever its bytes (unicode, tabs, trailing spaces, invalid
UTF-8 replaced on reading), encodes and decodes back exactly: the 256 bytes are the base
alphabet and the merges are learnt from the etude-mini projects and tasks plus the repository's
own Python. The bundled tokenizer lives in ``assets/tokenizer/`` as ``save_pretrained`` writes
it, so a checkpoint directory that holds a copy loads with ``AutoTokenizer`` and vLLM.

Token ids: the control tokens first (0, 1, 2), then the 256 bytes, then the merges, then the
format tags, for ``vocab_size`` ids in all: ``len(tokenizer) == vocab_size`` sizes the model's
embedding. ``encode`` adds no BOS or EOS; the caller writes ``<|endoftext|>`` where an episode
ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

EOS_TOKEN = "<|endoftext|>"

# Control tokens: HF `special=True`, so `decode(..., skip_special_tokens=True)` drops them (the
# default `decode` keeps them). Text from outside (files, tool output) that merely contains one
# should be encoded with `split_special_tokens=True`, which spells it out in bytes instead.
CONTROL_TOKENS: tuple[str, ...] = (
    EOS_TOKEN,  # ends a document or an episode; also the padding token (padding is masked)
    "<|im_start|>",  # opens a chat turn: `<|im_start|>assistant\n` (ChatML, as Qwen writes it)
    "<|im_end|>",  # closes a chat turn
)
# Tags of the tool-call format (etude.common.toolcalls) that never carry attributes, one token
# each so the policy writes them in one step and cannot misspell them. HF `special=False`: no
# decode drops them (vLLM decodes with skip_special_tokens=True), so the text the parser reads
# always holds them literally. `<function=NAME>`, `<parameter=NAME>` and the opening
# `<tool_result …>` / `<tool_error …>` tags carry a name or attributes and stay ordinary text.
FORMAT_TOKENS: tuple[str, ...] = (
    "<tool_call>",  # opens a call block
    "</tool_call>",  # closes it
    "</function>",  # closes the function inside a block
    "</parameter>",  # closes a parameter value
    "</tool_result>",  # closes a tool's output, as the environment sends it back
    "</tool_error>",  # closes a parse error report
)
SPECIAL_TOKENS: tuple[str, ...] = CONTROL_TOKENS + FORMAT_TOKENS

BUNDLED_VOCAB_SIZE = 8192
BUNDLED_TOKENIZER_DIR = Path(__file__).resolve().parent / "assets" / "tokenizer"
# A pair seen once is memorisation, not a pattern: merges need two occurrences.
MIN_MERGE_FREQUENCY = 2

_SERVICES_DIR = Path(__file__).resolve().parents[1]
# Generated protobuf stubs (serialized descriptors) would only teach merges of escaped bytes.
_EXCLUDED_DIRS = (_SERVICES_DIR / "api",)


def default_corpus_files() -> list[Path]:
    """The bundled corpus: etude-mini's projects and tasks file, and the repository's Python."""
    from etude.tasks.materialize import PROJECTS_DIR, TASKS_FILE

    own = [p for p in _SERVICES_DIR.rglob("*.py") if not _excluded(p, PROJECTS_DIR)]
    return corpus_files([PROJECTS_DIR, TASKS_FILE, *own])


def _excluded(path: Path, projects_dir: Path) -> bool:
    return any(path.is_relative_to(d) for d in (*_EXCLUDED_DIRS, projects_dir))


def corpus_files(paths: Iterable[Path]) -> list[Path]:
    """Files, with directories expanded to their ``*.py``; resolved, deduplicated and sorted so
    that the order of the arguments does not change the result."""
    files: set[Path] = set()
    for path in map(Path, paths):
        if path.is_dir():
            files.update(p.resolve() for p in path.rglob("*.py") if p.is_file())
        elif path.is_file():
            files.add(path.resolve())
        else:
            raise FileNotFoundError(f"no such file or directory: {path}")
    return sorted(files)


def corpus_texts(files: Sequence[Path]) -> Iterator[str]:
    """One text per source file; a ``.jsonl`` task file gives the distinct problem statements,
    fixes and test patches of its tasks (in sorted order)."""
    from etude.tasks.task import read_jsonl

    for path in files:
        if path.suffix == ".jsonl":
            tasks = list(read_jsonl(path))
            for field in ("instruction", "gold_patch", "test_patch"):
                yield from sorted({getattr(task, field) for task in tasks} - {""})
        else:
            yield path.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(
    files: Iterable[Path] | None = None, vocab_size: int = BUNDLED_VOCAB_SIZE
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE of exactly ``vocab_size`` ids on ``files`` (default: the bundled
    corpus; directories are searched for ``*.py``). Deterministic: the same files give the same
    vocabulary and merges. Raises ValueError if the corpus has too few repeated pairs to fill
    ``vocab_size``."""
    paths = corpus_files(files) if files is not None else default_corpus_files()
    minimum = len(SPECIAL_TOKENS) + 256
    if vocab_size <= minimum:
        raise ValueError(f"vocab_size must exceed {minimum} (special tokens and bytes)")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(FORMAT_TOKENS),
        min_frequency=MIN_MERGE_FREQUENCY,
        special_tokens=list(CONTROL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus_texts(paths), trainer)
    # The byte-level pre-tokenizer splits '<', '/', names and '>' apart, so no merge equals a
    # tag: each gets a new id at the end.
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in FORMAT_TOKENS])
    if backend.get_vocab_size() != vocab_size:
        raise ValueError(
            f"the corpus ({len(paths)} files) only fills {backend.get_vocab_size()} of "
            f"{vocab_size} ids with merges seen at least {MIN_MERGE_FREQUENCY} times: "
            "add text or ask for a smaller vocabulary"
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        # The default clean-up rewrites " ." as "." and the like: decoding would lose text.
        clean_up_tokenization_spaces=False,
        model_input_names=["input_ids", "attention_mask"],
    )


def load_tokenizer(source: str | Path | None = None) -> PreTrainedTokenizerFast:
    """The bundled tokenizer (``None`` or ``"etude"``), or any Hugging Face tokenizer saved in a
    directory (a checkpoint's, for instance), loaded with ``AutoTokenizer``."""
    if source is None or source == "etude":
        directory = BUNDLED_TOKENIZER_DIR
    else:
        directory = Path(source)
        if not directory.is_dir():
            raise FileNotFoundError(
                f"tokenizer source {str(source)!r} is neither 'etude' nor a directory"
            )
    return AutoTokenizer.from_pretrained(directory)


def turn_end_token(tokenizer: PreTrainedTokenizerFast) -> str | None:
    """The special token the chat template closes a turn with (`<|im_end|>` in ChatML), or
    None when the tokenizer has no chat template or its turns end in plain text."""
    if not tokenizer.chat_template:
        return None
    sentinel = "\x00turn\x00"
    conversation = [{"role": "user", "content": sentinel}]
    rendered = tokenizer.apply_chat_template(conversation, tokenize=False)
    after = rendered[rendered.index(sentinel) + len(sentinel) :]
    ids = tokenizer.encode(after, add_special_tokens=False)
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    return tokenizer.convert_ids_to_tokens(ids[0]) if ids and ids[0] in special else None


def set_chat_stop_tokens(tokenizer: PreTrainedTokenizerFast) -> tuple[int, int]:
    """Make EOS the token that ends a chat turn and give the tokenizer a pad token (EOS when
    it has none), without adding tokens; returns (eos id, pad id). Samplers stop at EOS, so
    a policy's turn must end with it."""
    turn_end = turn_end_token(tokenizer)
    if turn_end is not None and turn_end != tokenizer.eos_token:
        tokenizer.eos_token = turn_end
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no EOS token and its chat template ends no turn")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer.eos_token_id, tokenizer.pad_token_id


def chars_per_token(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str]) -> float:
    """Mean characters per token over ``texts``: how well the tokenizer compresses them."""
    texts = list(texts)
    tokens = sum(len(ids) for ids in tokenizer(texts)["input_ids"]) if texts else 0
    return sum(map(len, texts)) / max(tokens, 1)
