"""`etude model …`: the policy model's assets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(
    help="The policy model: write, import or upcycle a checkpoint, train its tokenizer."
)
console = Console(stderr=True)

OutDir = Annotated[Path, typer.Option("--out", help="The tokenizer directory to write.")]


@app.command("train-tokenizer")
def train_tokenizer_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="More files or directories (their *.py) to train on.", exists=True),
    ] = None,
    # 8192 = BUNDLED_VOCAB_SIZE: the tokenizer module is imported late, transformers is slow.
    vocab_size: Annotated[
        int, typer.Option("--vocab-size", help="Ids in all, special tokens included.")
    ] = 8192,
    out: OutDir = Path("tokenizer"),
) -> None:
    """Train the byte-level BPE on etude-mini and the repository's Python (plus PATHS).

    The bundled tokenizer is made with `etude model train-tokenizer --out
    services/model/assets/tokenizer`.
    """
    from etude.model.tokenizer import (
        chars_per_token,
        corpus_files,
        corpus_texts,
        default_corpus_files,
        train_tokenizer,
    )

    files = corpus_files([*default_corpus_files(), *(paths or [])])
    try:
        tokenizer = train_tokenizer(files, vocab_size)
    except ValueError as error:
        console.print(f"[red]{error}[/]")
        raise typer.Exit(1) from None
    tokenizer.save_pretrained(out)
    texts = list(corpus_texts(files))
    size = sum(len(text.encode()) for text in texts)
    ratio = chars_per_token(tokenizer, texts)
    console.print(f"Wrote {out}", soft_wrap=True)
    console.print(f"  vocabulary:  {len(tokenizer)} tokens")
    console.print(f"  corpus:      {len(files)} files, {size:,} bytes of text")
    console.print(f"  compression: {ratio:.2f} characters per token on the corpus")


@app.command("init")
def init_command(
    out: Annotated[Path, typer.Option("--out", help="The checkpoint directory to write.")],
    preset: Annotated[str, typer.Option(help="tiny, tiny-dense or small.")] = "tiny",
    seed: Annotated[int, typer.Option(help="Seed of the initial weights.")] = 0,
    dtype: Annotated[str, typer.Option(help="float32 or bfloat16.")] = "float32",
    tokenizer: Annotated[
        Path | None, typer.Option(help="A tokenizer directory; default: the bundled one.")
    ] = None,
) -> None:
    """Write a freshly initialised model as a Hugging Face checkpoint directory (config.json,
    model.safetensors, tokenizer), loadable by transformers, vLLM and `etude.model`."""
    from etude.model.checkpoint import init_checkpoint

    try:
        model = init_checkpoint(preset, out, seed=seed, dtype=dtype, tokenizer_source=tokenizer)
    except ValueError as error:
        console.print(f"[red]{error}[/]")
        raise typer.Exit(1) from None
    console.print(f"Wrote {out}: {preset}, {model.num_parameters / 1e6:.1f} M parameters, {dtype}")


@app.command("import")
def import_command(
    source: Annotated[
        str,
        typer.Argument(
            help="A .gguf file, a Hugging Face checkpoint directory, or a pretrained name "
            "(smollm2-135m)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="The checkpoint directory to write.")],
    gguf_file: Annotated[
        str | None, typer.Option("--gguf-file", help="The .gguf file inside a SOURCE directory.")
    ] = None,
    dtype: Annotated[str, typer.Option(help="float32 (dequantized) or bfloat16.")] = "float32",
) -> None:
    """Import a pretrained model as a checkpoint directory (config.json, model.safetensors,
    the tokenizer with its chat template, generation_config.json). The tokenizer gets no new
    tokens: its EOS becomes the token that ends a chat turn."""
    from etude.model.importing import import_checkpoint
    from etude.model.pretrained import PRETRAINED, import_pretrained

    try:
        if source in PRETRAINED and gguf_file is None:
            model = import_pretrained(source, out, dtype=dtype)
        else:
            model = import_checkpoint(Path(source), out, gguf_file=gguf_file, dtype=dtype)
    except (ValueError, OSError) as error:
        console.print(f"[red]{error}[/]", soft_wrap=True)
        raise typer.Exit(1) from None
    config = model.config
    console.print(
        f"Wrote {out}: {config.model_type}, {model.num_parameters / 1e6:.1f} M parameters, "
        f"{dtype}, eos id {config.eos_token_id}",
        soft_wrap=True,
    )


@app.command("upcycle")
def upcycle_command(
    source: Annotated[Path, typer.Argument(help="A dense checkpoint directory.", exists=True)],
    experts: Annotated[int, typer.Option("--experts", help="Experts per layer.")],
    top_k: Annotated[int, typer.Option("--top-k", help="Experts per token.")],
    out: Annotated[Path, typer.Option("--out", help="The checkpoint directory to write.")],
    seed: Annotated[int, typer.Option(help="Seed of the router's initial weights.")] = 0,
) -> None:
    """Turn a dense checkpoint into an MoE by sparse upcycling: every expert a copy of the
    dense MLP, so its logits equal the dense model's until it trains."""
    from etude.model.upcycling import upcycle_checkpoint

    try:
        model = upcycle_checkpoint(source, out, num_experts=experts, top_k=top_k, seed=seed)
    except (ValueError, OSError) as error:
        console.print(f"[red]{error}[/]", soft_wrap=True)
        raise typer.Exit(1) from None
    config = model.config
    console.print(
        f"Wrote {out}: {config.model_type}, {experts} experts (top-{top_k}), "
        f"{model.num_parameters / 1e6:.1f} M parameters",
        soft_wrap=True,
    )
