"""TransformersChatModel: a local transformers causal LM behind one small interface the strategies use."""
from __future__ import annotations

import copy

import queue
import threading
import time
from concurrent.futures import Future

from dkilab.models.tool_calls import MARKERS
from dkilab.tracing import traced_generation
from dkilab.types import Generation

DEFAULT_CONTEXT = 2048


class TransformersChatModel:
    """`generate(messages_or_prompt, max_new_tokens, temperature=0, stop=None, memories=None)`.

    A `str` prompt is tokenised exactly as given; a list of `{"role", "content"}` dicts goes through
    the model's chat template with the generation prompt added. Decoding is greedy unless
    `temperature > 0`. `memories` are `(MemoryKV, alpha)` pairs injected as K/V (see `dkilab.models.kv`).
    """

    supports_kv = True
    batch_size = 1  # > 1: concurrent text generations are decoded together (see `_Batcher`, `with_batch_size`)
    _batch_worker: "_Batcher | None" = None

    def __init__(self, model, tokenizer, name: str, max_context: int | None = None):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        native = getattr(model.config, "max_position_embeddings", None) or DEFAULT_CONTEXT
        self.context_window = int(min(native, max_context) if max_context else native)
        eos = model.generation_config.eos_token_id if model.generation_config else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_token_ids = [eos] if isinstance(eos, int) else list(eos or [])

    def __repr__(self) -> str:
        return f"TransformersChatModel({self.name!r}, context_window={self.context_window})"

    # --- text <-> tokens -----------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text)) if text else 0

    def truncate(self, text: str, max_tokens: int) -> str:
        ids = self.encode(text)
        return text if len(ids) <= max_tokens else self.tokenizer.decode(ids[:max_tokens])

    def render(self, messages_or_prompt, tools: list[dict] | None = None) -> str:
        """The exact prompt text the model will see (`tools` go through the chat template)."""
        if isinstance(messages_or_prompt, str):
            return messages_or_prompt
        if not isinstance(messages_or_prompt, list) or not all(
                isinstance(m, dict) and {"role", "content"} <= m.keys() for m in messages_or_prompt):
            raise TypeError("generate expects a prompt string or a list of {'role', 'content'} dicts")
        kw = {"tools": tools} if tools else {}
        return self.tokenizer.apply_chat_template(messages_or_prompt, tokenize=False, add_generation_prompt=True, **kw)

    def decode_new(self, ids: list[int]) -> str:
        """Generated ids -> text: tool-call markers kept even where they are special tokens (a parser needs
        them), other special tokens dropped, and no character cut in half at the end (a multi-byte
        character split by `max_new_tokens` decodes to U+FFFD: its partial bytes are dropped)."""
        for _ in range(3):  # a UTF-8 character is at most 4 bytes: at most 3 trailing byte tokens to drop
            if not ids or not self.tokenizer.decode(ids).endswith("\ufffd"):
                break
            ids = ids[:-1]
        tok = self.tokenizer
        drop = {i for t, i in zip(tok.all_special_tokens, tok.all_special_ids) if t not in MARKERS}
        text = tok.decode([i for i in ids if i not in drop], skip_special_tokens=False)
        return text

    # --- generation ----------------------------------------------------------------------
    @traced_generation
    def generate_full(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                      stop: list[str] | None = None, memories=None, seed: int | None = None,
                      tools: list[dict] | None = None) -> Generation:
        from dkilab.models.kv import decode

        ids = self.encode(self.render(messages_or_prompt, tools))
        self._check_window(len(ids), max_new_tokens)
        if self.batch_size > 1 and not temperature and not stop:
            return self._batcher().submit(ids, max_new_tokens, memories or None)
        new, injected = decode(self, ids, memories, max_new_tokens, temperature, stop, seed)
        text = self.decode_new(new)
        for s in stop or []:
            if s in text:
                text = text[: text.index(s)]
        return Generation(text.strip(), len(ids), len(new), injected, token_ids=new)

    def _check_window(self, prompt_tokens: int, max_new_tokens: int) -> None:
        if prompt_tokens + max_new_tokens > self.context_window:
            raise ValueError(f"prompt of {prompt_tokens} tokens + {max_new_tokens} new tokens exceeds "
                             f"{self.name}'s context window of {self.context_window}")

    def with_batch_size(self, batch_size: int) -> "TransformersChatModel":
        """This model decoding `batch_size` questions together: a view on the same weights and tokenizer, so one
        cell's batch size never changes the model another cell holds."""
        if batch_size == self.batch_size:
            return self
        view = copy.copy(self)
        view.batch_size, view._batch_worker = batch_size, None
        return view

    def _batcher(self) -> "_Batcher":
        with _BATCHER_LOCK:
            old = self._batch_worker
            if old is None or old.size != self.batch_size:
                if old is not None:
                    old.close()
                old = self._batch_worker = _Batcher(self, self.batch_size)
            return old

    def generate_batch(self, prompts: list, max_new_tokens: int = 64, tools: list[dict]
                       | None = None) -> list[Generation]:
        """Greedy generation for several prompts at once (left padding, one forward pass per step):
        token for token what `generate_full` gives each prompt alone. No K/V memories here: strategies
        batch through `batch_size` in the model block, K/V ones too (`dkilab.models.kv_batch`)."""
        rendered = [self.encode(self.render(p, tools)) for p in prompts]
        for ids in rendered:
            self._check_window(len(ids), max_new_tokens)
        return self.decode_batch(rendered, max_new_tokens)

    def decode_batch(self, prompts_ids: list[list[int]], max_new_tokens: int) -> list[Generation]:
        """Greedy decoding of tokenised prompts together (left padded)."""
        import torch

        if not prompts_ids:
            return []
        longest = max(len(ids) for ids in prompts_ids)
        pad = self.tokenizer.pad_token_id
        pad = pad if pad is not None else (self.eos_token_ids[0] if self.eos_token_ids else 0)
        device = self.model.get_input_embeddings().weight.device
        ids = torch.tensor([[pad] * (longest - len(r)) + r for r in prompts_ids], device=device)
        mask = torch.tensor([[0] * (longest - len(r)) + [1] * len(r) for r in prompts_ids], device=device)
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                      do_sample=False, pad_token_id=pad, eos_token_id=self.eos_token_ids or None,
                                      temperature=None, top_p=None, top_k=None)
        gens = []
        for r, row in zip(prompts_ids, out[:, longest:].tolist()):
            new = []
            for t in row:
                if t in self.eos_token_ids:
                    break
                new.append(t)
            gens.append(Generation(self.decode_new(new).strip(), len(r), len(new), token_ids=new))
        return gens

    def generate(self, messages_or_prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                 stop: list[str] | None = None, memories=None, seed: int | None = None,
                 tools: list[dict] | None = None) -> str:
        return self.generate_full(messages_or_prompt, max_new_tokens, temperature, stop, memories, seed, tools).text


class TokenizerOnlyModel(TransformersChatModel):
    """A model's tokenizer, chat template and window without its weights: what a context-only cell
    (`model: {generate: false}`) needs to build and count exactly the prompt and K/V blocks a strategy
    would give the model. Generating is refused with the reason."""

    def __init__(self, tokenizer, config, name: str, max_context: int | None = None):
        self.model, self.tokenizer, self.name, self.config = None, tokenizer, name, config
        native = getattr(config, "max_position_embeddings", None) or DEFAULT_CONTEXT
        self.context_window = int(min(native, max_context) if max_context else native)
        self.eos_token_ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []

    def __repr__(self) -> str:
        return f"TokenizerOnlyModel({self.name!r}, context_window={self.context_window})"

    def generate_full(self, *args, **kwargs) -> Generation:
        raise RuntimeError(f"{self.name} was loaded without weights (model.generate is false): this strategy "
                           "generates while it builds its context, so a context-only cell needs the whole model")


_BATCHER_LOCK = threading.Lock()


class _Batcher:
    """Coalesces concurrent greedy generations into batches of up to `size` prompts (the runner answers
    `batch_size` questions in threads; each strategy still calls `generate`): text prompts into
    `decode_batch`, prompts with K/V memories into `kv_batch.decode_many`. A batch waits at most `wait`
    seconds for company; prompts with another `max_new_tokens`, or the other kind, go in another batch.
    An error reaches every caller of its batch; the worker goes on."""

    def __init__(self, model: TransformersChatModel, size: int, wait: float = 0.05):
        self.model, self.size, self.wait = model, size, wait
        self.queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, name="dkilab-batcher", daemon=True).start()

    def submit(self, prompt_ids: list[int], max_new_tokens: int, memories=None) -> Generation:
        fut: Future = Future()
        self.queue.put((prompt_ids, max_new_tokens, fut, memories))
        return fut.result()

    def close(self) -> None:
        self.queue.put(None)  # the worker finishes what is queued before it, then ends

    def _run(self) -> None:
        while True:
            first = self.queue.get()
            if first is None:
                return
            batch, closing = [first], False
            deadline = time.monotonic() + self.wait
            while len(batch) < self.size and (left := deadline - time.monotonic()) > 0:
                try:
                    item = self.queue.get(timeout=left)
                except queue.Empty:
                    break
                if item is None:
                    closing = True
                    break
                batch.append(item)
            groups: dict[tuple[int, bool], list] = {}
            for item in batch:
                groups.setdefault((item[1], item[3] is not None), []).append(item)
            for (max_new, kv), items in groups.items():
                try:
                    gens = (self._decode_kv(items, max_new) if kv
                            else self.model.decode_batch([i[0] for i in items], max_new))
                    for item, gen in zip(items, gens):
                        item[2].set_result(gen)
                except BaseException as exc:
                    for item in items:
                        if not item[2].done():
                            item[2].set_exception(exc)
            if closing:
                return

    def _decode_kv(self, items: list, max_new: int) -> list[Generation]:
        from dkilab.models.kv_batch import decode_many

        out = decode_many(self.model, [(i[0], i[3]) for i in items], max_new)
        return [Generation(self.model.decode_new(new).strip(), len(i[0]), len(new), injected, token_ids=new)
                for i, (new, injected) in zip(items, out)]
