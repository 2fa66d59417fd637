"""Build a tiny random-weight Llama and a locally trained tokenizer (nothing is downloaded).

Runs under the vLLM venv's python (it needs torch, transformers and tokenizers):
`python tiny_model.py OUT_DIR`. The weights are random, so the text is noise, but the engine,
the tokenizer, the chat template and the HTTP server are vLLM's own: enough to check formats,
counts, ids and traces. A fixed seed makes the model the same on every run.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<s>", "</s>", "<unk>"]


# Mixed text for the BPE merges: words, digits, punctuation and some non-ASCII, so the
# byte-level fallback (multi-byte characters split over tokens) shows up in outputs too.
TEXT = (
    "the quick brown fox jumps over a lazy dog while latency proxies measure time to "
    "first token and tokens per second on streaming servers; café naïve über 東京 大阪 "
    "données modèle λ μ σ 0 1 2 3 4 5 6 7 8 9 , . ! ? : ; ( ) [ ] { } < > | - _ ="
)


def corpus() -> list[str]:
    """Every rotation of the words, so merges see each word in many neighbourhoods."""
    words = TEXT.split()
    return [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 20


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,  # small: more byte-level pieces, so more partial-UTF-8 chunks
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=8192,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    build(Path(sys.argv[1]))
