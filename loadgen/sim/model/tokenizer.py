"""The simulator's tokenizer and text generator. Pure, no I/O.

The rule is deliberately simple so a client can build a prompt of an exact length:

- text: every maximal run of non-whitespace characters is one token ("a b  c" = 3);
- chat messages: each message adds one token for its role header plus its content's
  tokens (text parts of a list content count, other parts do not); one more token opens the
  assistant's turn (the generation prompt). No other special tokens (no BOS).

Token ids are a stable 31-bit hash of the token text, wide enough that distinct tokens
practically never share one. A hash cannot be read backwards, so `Vocabulary` remembers the
tokens the simulator has given ids for (its /tokenize answers) and /detokenize reads ids
back through it: detokenizing what /tokenize returned gives the tokens joined by single
spaces, which tokenizes to the same ids again. Generated text is words from a fixed
vocabulary, one word per token, separated by single spaces, so re-tokenizing a completion
gives back its token count.

`SUBWORDS` is a second rule, for tests only (script.py's `"tokenizer": "subwords"`): words of
more than four characters are two tokens, a text prompt opens with a BOS token, and a chat
message's role header is three tokens, the generation prompt two (ChatML's shape). A client
that sizes prompts by counting words is wrong against it, as against a real BPE tokenizer.
"""

from __future__ import annotations

import re
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

VOCAB_SIZE = 2**31
_WORD = re.compile(r"\S+")
WORDS = tuple(
    _WORD.findall(
        "the of and to in is that for it as was with be by on not he this are or his from at "
        "which but have an they you were her she there one all we their can has more will "
        "would been if no when what so said who about time out up into them some could other "
        "then its only new these two may first any like now my such make over our even most"
    )
)


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """A counting rule: how text, a prompt and a conversation become tokens."""

    long_word: int | None = None  # a word longer than this many characters is two tokens
    bos: tuple[str, ...] = ()  # opens a text prompt
    role_header: tuple[str, ...] = ("<|{role}|>",)  # opens each chat message
    generation_prompt: tuple[str, ...] = ("<|assistant|>",)  # opens the assistant's turn

    def text(self, text: str) -> list[str]:
        words = _WORD.findall(text)
        if self.long_word is None:
            return words
        cut = self.long_word
        return [piece for w in words for piece in ((w,) if len(w) <= cut else (w[:cut], w[cut:]))]

    def prompt(self, text: str) -> list[str]:
        """A text prompt (completions, /tokenize): its BOS, then its text."""
        return [*self.bos, *self.text(text)]

    def chat(
        self, messages: Iterable[Mapping[str, Any]], generation_prompt: bool = True
    ) -> list[str]:
        tokens: list[str] = []
        for message in messages:
            role = message.get("role", "user")
            tokens.extend(piece.format(role=role) for piece in self.role_header)
            tokens.extend(self.text(message_text(message.get("content"))))
        if generation_prompt:
            tokens.extend(self.generation_prompt)
        return tokens


SIMPLE = Tokenizer()  # the simulator's own rule (the module docstring)
SUBWORDS = Tokenizer(
    long_word=4,
    bos=("<s>",),
    role_header=("<|im_start|>", "{role}", "\n"),
    generation_prompt=("<|im_start|>", "assistant"),
)
TOKENIZERS = {"words": SIMPLE, "subwords": SUBWORDS}


def token_id(token: str) -> int:
    return zlib.crc32(token.encode()) % VOCAB_SIZE


class Vocabulary:
    """The tokens behind the ids the simulator has handed out: the `capacity` most recently
    used distinct ones (bounded memory however varied the prompts). An id it does not know
    detokenizes to nothing, as an id beyond a real vocabulary does in vLLM."""

    def __init__(self, capacity: int = 1 << 16) -> None:
        self._capacity = capacity
        self._tokens: OrderedDict[int, str] = OrderedDict()

    def ids(self, tokens: Iterable[str]) -> list[int]:
        """The tokens' ids, remembered for `text`."""
        ids = []
        for token in tokens:
            tid = token_id(token)
            self._tokens[tid] = token
            self._tokens.move_to_end(tid)
            ids.append(tid)
        while len(self._tokens) > self._capacity:
            self._tokens.popitem(last=False)
        return ids

    def text(self, ids: Iterable[int]) -> str:
        """The text of token ids: their tokens joined by single spaces (unknown ids left out)."""
        return " ".join(token for tid in ids if (token := self._tokens.get(tid)) is not None)


def message_text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part.get("text", "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    raise TypeError("message content must be a string or a list of content parts")


def fingerprint(tokens: list[str]) -> int:
    """A stable 32-bit summary of a prompt, so equal prompts get equal completions."""
    return zlib.crc32("\0".join(tokens).encode())


# The output text: a fixed pseudo-random cycle of space-prefixed words that each request
# enters at its own offset. Slicing it keeps planning a long completion cheap.
_CYCLE_LEN = 1 << 15
_CYCLE = tuple(" " + WORDS[(i * 2654435761 >> 8) % len(WORDS)] for i in range(_CYCLE_LEN))


def generated_pieces(key: int, count: int) -> list[str]:
    """The text of `count` output tokens for a request keyed by `key`: one word each, the
    first without its leading space. Token i is the same for the same key whatever count."""
    offset = key % _CYCLE_LEN
    pieces = list(_CYCLE[offset : offset + count])
    while len(pieces) < count:
        pieces.extend(_CYCLE[: count - len(pieces)])
    if pieces:
        pieces[0] = pieces[0][1:]
    return pieces
