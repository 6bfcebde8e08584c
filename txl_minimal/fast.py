"""Fast paths beside ``model.py``'s explicit ones: the same numbers, less time on a CPU.

``model.py`` teaches the computation; this file only makes it cheaper. It subclasses the
model's modules, ``FastAttention`` over every attention class (``project``, ``attend``),
``FastModel`` over ``TransformerXL`` (what an evaluation keeps, the next memory) and ``Dropout``
over ``nn.Dropout``, and ``switch`` swaps them in and out of a model: ``TransformerXL.fast_attn``
calls it through ``controls.SPEEDUP``, the one hook, set when this module is imported (the package
does). Each path is tested equal to the explicit code it replaces (tests/test_fast.py). What each
one saved on a training step is measured in benchmarks/README.md ("Levers"). Without this file
(``model.py`` copied alone) the model runs its explicit code.

- ``dropout``: the same distribution as ``nn.Dropout`` from 16 random bits per element,
  drawn 64 at a time (``aten::bernoulli_`` draws one 32-bit number per element, then
  ``nn.Dropout`` divides its float mask in a second pass).
- ``rel_shift``: the relative shift of Appendix B as a strided *view* (no padded copy).
- ``relative_attention``: softmax(scale (q+u)k^T + scale (q+v)R^T shifted + mask) V with
  the shift, the mask and the scale folded into the one tensor that the (a)+(c) product
  is added to (``baddbmm``), or given to ``scaled_dot_product_attention`` when nothing
  needs its gradient.
- ``project_qkv`` projects queries for the segment's rows only, and ``sliced_memory`` slices the
  next memory from the [memory o segment] that the projection made (one concatenation fewer).
- evaluation (eval mode, no gradient): what does not change between segments is kept:
  the keys and values of the memory's rows (``project_reusing_memory``), R, W_k,R R of a key
  length, the mask and its bias (``memo``, ``kept``). Each is kept with the autocast state it was
  made under (``autocast_state``): a bf16 W_k,R R from a validation run under autocast is not
  reused by an fp32 evaluation afterwards, nor the other way round.

For a GPU (issue 30; benchmarks/gpu_compare.py times each, tests/gpu checks them there):

- ``STRIDED_SDPA``: on CUDA, SDPA reads q, k, v in the layout their projection made (no copies).
- ``attend_flex``: FlexAttention, the shifted (b)+(d) and the mask added inside the kernel
  (``FastModel.flex_attn``; torch >= 2.5; off by default).
- ``compile_segment``: ``model.segment`` under ``torch.compile``, with CUDA graphs' bookkeeping
  ("reduce-overhead"): training's ``devices.Segments`` and ``evaluate(compile=...)`` use it.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from txl_minimal import controls, model as model_py
from txl_minimal.model import RelMultiHeadAttn, TransformerXL

_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)  # (torch < 2.3: never)

# ----------------------------------------------------------------------------- dropout

_LANES = 4  # 16-bit lanes in one 64-bit random number


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> torch.Tensor:
    """Float tensor of ``shape``: 1 / (1 - p) with probability 1 - p (to 1/65536), else 0.

    One 64-bit draw gives four 16-bit lanes, each compared with a threshold: a quarter of
    the generator calls of ``bernoulli_``, and the comparison writes the float mask directly.
    The draws come from torch's default generator, so ``torch.manual_seed`` and a
    checkpoint's RNG state reproduce them."""
    n = 1
    for s in shape:
        n *= s
    bits = torch.empty((n + _LANES - 1) // _LANES, dtype=torch.int64, device=device)
    bits.random_(-2 ** 63, None)  # all 64 bits (random_() alone leaves the sign bit 0)
    threshold = -32768 + round(p * 65536)  # P(lane >= threshold) = 1 - p
    mask = torch.empty(shape, device=device)
    torch.ge(bits.view(torch.int16)[:n].view(shape), threshold, out=mask)
    return mask.mul_(1.0 / (1.0 - p))


class _Dropout(torch.autograd.Function):
    """y = x * mask; the backward pass multiplies by the same mask."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        mask = keep_mask(x.shape, p, x.device).to(x.dtype)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (mask,) = ctx.saved_tensors
        return grad * mask, None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with cheaper random numbers on a CPU. Elsewhere (CUDA has
    its own fused dropout), under ``torch.compile`` (inductor fuses its own) and when nothing
    is dropped it is ``F.dropout`` itself."""
    if not training or p == 0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training)
    return _Dropout.apply(x, p)


class _Fast:
    """Marks fast.py's subclasses; ``explicit``: the class each one replaces (``switch``)."""

    explicit: type = object

    def __reduce_ex__(self, protocol):  # pickle (torch.save(model)) finds the class through fast_class
        return _rebuild, (self.explicit,), self.__dict__


def _rebuild(explicit: type):
    cls = fast_class(explicit)
    return cls.__new__(cls)


# What the fast paths stand in for, as model.py defined it when this module was imported: a function of model.py
# or a method of its classes replaced since (a student's ``txl_minimal.model.rel_shift = my_rel_shift``, a patched
# ``RelMultiHeadAttn.attend``) is run, not skipped: the fast path steps aside (``active``, ``_own``).
EXPLICIT_FUNCTIONS = {name: getattr(model_py, name) for name in
                      ("rel_shift", "attention_mask", "update_memory", "sinusoid_table")}
_EXPLICIT_METHODS = {(base, name): getattr(base, name) for base, names in
                     ((RelMultiHeadAttn, ("project", "attend", "positional_score", "reweight")),
                      (TransformerXL, ("relative_encoding", "mask", "next_memory"))) for name in names}


def replaced_functions() -> list[str]:
    """The functions of model.py that have been replaced since this module was imported (their own code runs:
    with any of them replaced, every fast path steps aside)."""
    return [name for name, f in EXPLICIT_FUNCTIONS.items() if getattr(model_py, name) is not f]


def _own(module: nn.Module, name: str, base: type) -> bool:
    """``module``'s explicit class computes ``name`` as ``base`` (model.py) did: not a subclass's own
    version, nor one patched onto ``base`` since, which the fast path would skip (``project``, ``attend``, ...)."""
    return getattr(type(module).explicit, name) is _EXPLICIT_METHODS[base, name]


class Dropout(_Fast, nn.Dropout):
    """``nn.Dropout`` by ``dropout`` above; no parameters, so the state dict is ``nn.Dropout``'s (none)."""

    explicit = nn.Dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not active(self):
            return super().forward(x)
        return dropout(x, self.p, self.training)


# ----------------------------------------------------------------------------- projection and memory

def project_qkv(att: nn.Module, h: torch.Tensor, mem):
    """``RelMultiHeadAttn.project(att, h, mem)`` without projecting the memory's rows to queries (only the segment's
    queries are used): q = W_q h and [k, v] = W_kv [SG(m) o h], a third fewer projection FLOPs on
    the memory's rows. The concatenation is kept for ``sliced_memory``."""
    hd = att.n_head * att.d_head
    cat = h if mem is None else torch.cat([mem, h], dim=1)
    w_q, w_kv = att.qkv_net.weight.split([hd, 2 * hd])
    q = F.linear(att.layer_norm(h) if att.cfg.pre_lnorm else h, w_q)  # LayerNorm is row by row
    k, val = F.linear(att.layer_norm(cat) if att.cfg.pre_lnorm else cat, w_kv).chunk(2, dim=-1)
    att._segment_input = (h, mem, cat)
    return att._heads(q), att._heads(k), att._heads(val)


def sliced_memory(model: nn.Module, hids: list[torch.Tensor], mems, mem_len: int):
    """``model_py.update_memory(hids, mems, mem_len)`` from each layer's [SG(m) o h] that ``project_qkv``
    kept: one concatenation per layer instead of two. None (use ``update_memory``) unless every
    layer read exactly ``mems[i]`` and ``hids[i]`` (not a trimmed or shifted copy)."""
    kept = [layer.dec_attn.__dict__.pop("_segment_input", None) for layer in model.layers]
    if mem_len == 0 or any(k is None or k[0] is not h or k[1] is not (None if mems is None else m)
                           for k, h, m in zip(kept, hids, mems or [None] * len(hids))):
        return None
    with torch.no_grad():
        return [cat[:, -mem_len:].detach() for _, _, cat in kept]  # SG: no gradient flows into the memory


# ----------------------------------------------------------------------------- relative shift

class _RelShift(torch.autograd.Function):
    """The view of ``rel_shift`` below. Its rows overlap by one element (row i's last column
    is row i+1's first), so autograd's generic ``as_strided`` backward would take its slow
    path for overlapping views; the backward here writes the gradient of the (T, K-1) block
    that does not overlap, then adds the last element."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.shape = x.shape
        return _shifted_view(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        *lead, qlen, klen = ctx.shape
        out = grad.new_empty(*lead, qlen * klen)
        out[..., :qlen - 1] = 0  # the first qlen-1 elements are never read by the view
        # element (i, j) of the view is element qlen-1 + i(klen-1) + j of a row-major (qlen, klen)
        body = out[..., qlen - 1: qlen - 1 + qlen * (klen - 1)].view(*lead, qlen, klen - 1)
        body.copy_(grad[..., :klen - 1])
        out[..., -1] = grad[..., -1, -1]  # the last row's last column (no overlap: no row after it)
        # every other column klen-1 aliases the next row's column 0: its gradient is dropped
        # here; it is a masked (future) score, whose gradient is 0 (attention_mask)
        return out.view(ctx.shape)


def _shifted_view(x: torch.Tensor) -> torch.Tensor:
    *lead, qlen, klen = x.shape
    x = x.contiguous()
    strides = list(x.stride()[:-2]) + [klen - 1, 1]
    return x.as_strided((*lead, qlen, klen), strides, x.storage_offset() + qlen - 1)


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """``model.rel_shift`` without its padded copy: row i of the result is row i of ``x`` read
    from column qlen-1-i on (into row i+1 past the end). Equal to ``model.rel_shift`` wherever
    key j <= mlen + i (every entry the causal mask keeps); the masked entries differ."""
    return _RelShift.apply(x)


# ----------------------------------------------------------------------------- attention

# The SDPA route reads q, k, v in the layout their projection made, (B, H, ., D) views of (B, ., H, D),
# and the bias as a (B, H, T, K) view of the heads-first one: no copies into heads-first order (nor
# of their gradients), and the output comes back in the (B, T, H, D) order the output projection
# reads. None: on CUDA, whose kernels read any such strides; a CPU keeps the heads-first copies (its
# numbers are then those it always had). True or False forces either (tests, benchmarks).
STRIDED_SDPA: bool | None = None


def relative_attention(q_u: torch.Tensor, q_v: torch.Tensor, k: torch.Tensor, val: torch.Tensor,
                       r: torch.Tensor, mask_bias: torch.Tensor, scale: float, dropatt: float,
                       training: bool, sdpa: bool | None = None) -> torch.Tensor:
    """softmax(scale [(q+u) k^T + shift((q+v) r^T)] + mask) V for q_u, q_v (B, H, T, D), k, val
    (B, H, K, D), r = W_k,R R (H, K, D) and mask_bias (T, K): 0 where a key may be seen, the
    lowest finite value where not (it must hide every j > mlen + i, as ``attention_mask`` does).
    Returns (B, H, T, D); no probabilities (the explicit code in ``model.py`` has them).

    Heads go first, (H, B, ...): then (q+v) r^T for all rows is one matmul per head, and every
    (T, K) tensor below is made contiguous once, by the add that builds the bias. The scores go
    to ``scaled_dot_product_attention`` on a GPU (its kernels differentiate the bias) and on a
    CPU when no gradient is needed; a CPU's SDPA kernel cannot differentiate a bias, so there
    the bias is added by the matmul itself (``baddbmm``). ``sdpa`` forces either (tests)."""
    B, H, T, D = q_u.shape
    K = k.size(2)
    heads_first = lambda t: t.transpose(0, 1).reshape(H * B, t.size(2), D)  # noqa: E731
    qv = (q_v * scale).transpose(0, 1).reshape(H, B * T, D)
    bd = torch.bmm(qv, r.transpose(1, 2)).view(H, B, T, K)  # (b) + (d), scaled, before the shift
    bias = rel_shift(bd) + mask_bias  # shifted and masked: a fresh (H, B, T, K) tensor
    if sdpa is None:
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q_u, k, val, bias))
        sdpa = q_u.is_cuda or not (needs_grad or (training and dropatt > 0))
    p = dropatt if training else 0.0
    if sdpa and (q_u.is_cuda if STRIDED_SDPA is None else STRIDED_SDPA):  # (its gradient needs no reshape)
        bias = bias.transpose(0, 1).to(q_u.dtype)
        return F.scaled_dot_product_attention(q_u, k, val, attn_mask=bias, dropout_p=p, scale=scale)
    bias = bias.view(H * B, T, K)
    q_u, k, val = heads_first(q_u), heads_first(k), heads_first(val)
    if sdpa:
        four = lambda t: t.view(H, B, t.size(1), t.size(2))  # noqa: E731  (4-d: the fused CPU kernel)
        out = F.scaled_dot_product_attention(four(q_u), four(k), four(val), attn_mask=four(bias.to(q_u.dtype)),
                                             dropout_p=p, scale=scale)
    else:  # (a) + (c) added onto the bias by the matmul itself (beta = 1), scaled (alpha)
        score = torch.baddbmm(bias.to(q_u.dtype), q_u, k.transpose(1, 2), alpha=scale)
        low = score.dtype in (torch.bfloat16, torch.float16)  # their softmax is taken in float32
        prob = F.softmax(score, dim=-1, dtype=torch.float32 if low else None).to(val.dtype)
        out = torch.bmm(dropout(prob, dropatt, training), val)
    return out.view(H, B, T, D).transpose(0, 1)


_AUTOCAST_BY_DEVICE_TYPE = hasattr(torch, "get_autocast_dtype")  # torch >= 2.4


def autocast_state(device: torch.device) -> tuple:
    """(device type, autocast on, its dtype or None) for tensors on ``device``. Part of the key of
    every value kept across calls: what is computed under autocast has another dtype (W_k,R R in
    bf16) even where the tensors it is combined with do not show it (q + u is float32 under
    autocast: the bf16 projection plus a float32 parameter). torch >= 2.4 asks by device type;
    torch 2.3 has one function per device (``is_autocast_cpu_enabled``, ``get_autocast_gpu_dtype``)."""
    kind = torch.device(device).type
    if _AUTOCAST_BY_DEVICE_TYPE:
        on = torch.is_autocast_enabled(kind)
        return kind, on, torch.get_autocast_dtype(kind) if on else None
    if kind == "cuda":  # torch 2.3: the argument-less functions are CUDA's
        on = torch.is_autocast_enabled()
        return kind, on, torch.get_autocast_gpu_dtype() if on else None
    enabled = getattr(torch, f"is_autocast_{kind}_enabled", None)  # cpu, xpu, hpu, ipu
    if enabled is None:
        return kind, False, None
    on = enabled()
    return kind, on, getattr(torch, f"get_autocast_{kind}_dtype")() if on else None


def attend_rel(att: nn.Module, q, q_u, k, val, pos, mask, v) -> torch.Tensor:
    """``FastAttention.attend`` for Transformer-XL's own positional term: W_k,R R and the mask
    as a bias (0 or the lowest finite value: -inf gives NaN in bf16), then ``relative_attention``.
    In an evaluation both are the same for every segment of a length and autocast state, so they
    are kept (``memo``)."""
    def keys() -> torch.Tensor:  # W_k,R R: (H, klen, D)
        return att.r_net(pos).view(-1, att.n_head, att.d_head).transpose(0, 1)

    def bias() -> torch.Tensor:
        lowest = torch.finfo(q_u.dtype).min
        return torch.zeros(mask.shape, dtype=q_u.dtype, device=mask.device).masked_fill_(mask, lowest)
    if reusing(att):
        cfg = att.cfg
        lengths = (mask.shape, cfg.same_length, cfg.mem_len, cfg.clamp_len, q_u.dtype, q_u.device,
                   autocast_state(q_u.device))  # W_k,R R is bf16 under autocast, q_u is not
        r = memo(att, "r", (lengths, _versions(att.r_net.weight)), keys)
        mask_bias = memo(att, "mask", lengths, bias)
    else:
        r, mask_bias = keys(), bias()
    q_v = q if v is None else q + v[:, None]
    return relative_attention(q_u, q_v, k, val, r, mask_bias, att.scale, att.cfg.dropatt, att.training)


def flex_available() -> bool:
    """Whether this torch has FlexAttention (torch.nn.attention.flex_attention, torch >= 2.5)."""
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def attend_flex(att: nn.Module, q, q_u, k, val, pos, mask, v) -> torch.Tensor:
    """``attend_rel`` through FlexAttention (``FastModel.flex_attn``): one kernel takes scale (q+u) k^T
    and adds, inside, the scaled (b)+(d) read at its shifted column and the mask. (q+v) (W_k,R R)^T is
    still one matmul, as in ``relative_attention``, but neither its shifted copy, nor the mask's bias,
    nor the gradient of a (B, H, T, K) bias is made, and the scores never leave the kernel. Compiled
    (``torch.compile``) it is a fused kernel; eagerly, torch runs it unfused (slow: for tests). No
    attention dropout (``FastAttention.attend`` uses it only when none is to be dropped)."""
    from torch.nn.attention.flex_attention import flex_attention
    B, H, T, D = q_u.shape
    K = k.size(2)
    r = att.r_net(pos).view(-1, H, D).transpose(0, 1)  # W_k,R R: (H, K, D)
    q_v = q if v is None else q + v[:, None]
    qv = (q_v * att.scale).transpose(0, 1).reshape(H, B * T, D)
    bd = torch.bmm(qv, r.transpose(1, 2)).view(H, B, T, K)  # (b) + (d), scaled, before the shift

    def score_mod(score, b, h, i, j):
        # rel_shift as an index: query i's key j sits in column j + T-1-i of the unshifted row (the
        # columns past the end belong to masked keys; clamped, so that no read leaves the tensor)
        shifted = bd[h, b, i, torch.clamp(j + (T - 1) - i, max=K - 1)]
        return torch.where(mask[i, j], float("-inf"), score + shifted)

    dtype = k.dtype  # (under autocast q + u is float32, k bfloat16: one dtype for the kernel)
    return flex_attention(q_u.to(dtype), k, val.to(dtype), score_mod=score_mod, scale=att.scale)


# ----------------------------------------------------------------------------- torch.compile

def compile_segment(model: nn.Module, mode: str = "default"):
    """``model.segment`` compiled by ``torch.compile`` in ``mode`` ("default", or "reduce-overhead":
    also CUDA graphs, the whole segment replayed by one launch). Called like ``segment`` with
    (tokens, mems, targets). Under CUDA graphs each call starts a new step, and the memory it
    returns is copied: the next replay overwrites the graph's own outputs. The compiler traces
    model.py's plain code (the paths above step aside while it traces)."""
    compiled = torch.compile(model.segment, **({} if mode == "default" else dict(mode=mode)))
    if mode != "reduce-overhead":
        return compiled
    mark_step = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)

    def replay(tokens, mems=None, targets=None):
        mark_step()
        out = compiled(tokens, mems, targets)
        out.mems = [m.clone() for m in out.mems]
        return out
    return replay


# ----------------------------------------------------------------------------- evaluation

def active(module: nn.Module) -> bool:
    """``module`` is one of this file's subclasses (``TransformerXL.fast_attn``) and runs eagerly (under
    ``torch.compile`` the model's plain code is traced: the compiler fuses it itself), with model.py's
    functions as they were (``replaced_functions``: a student's own rel_shift runs, not the fast path's)."""
    return isinstance(module, _Fast) and not _compiling() and all(
        getattr(model_py, name) is f for name, f in EXPLICIT_FUNCTIONS.items())


def reusing(module: nn.Module) -> bool:
    """True when what one segment computes may be kept for the next: an evaluation (eval mode,
    no gradient) with the fast paths on. The weights cannot change between such calls without
    bumping a version counter, which every kept value checks."""
    return active(module) and not module.training and not torch.is_grad_enabled()


def _versions(*tensors: torch.Tensor) -> tuple:
    """Identity and in-place-update count of each tensor: equal only if none was replaced or changed."""
    return tuple((t.data_ptr(), t._version, t.dtype) for t in tensors)


def memo(owner: nn.Module, name: str, key: tuple, make):
    """``make()``, or the value ``owner`` kept under ``name`` for the same ``key``; one value per name."""
    kept = owner.__dict__.get("_memo_" + name)
    if kept is not None and kept[0] == key:
        return kept[1]
    value = make()
    owner.__dict__["_memo_" + name] = (key, value)
    return value


def forget(model: nn.Module) -> None:
    """Drop everything an evaluation kept (``memo``, ``kept``, the memory's keys and values). Called
    when the model enters eval mode (``FastModel.train``) and when ``switch`` swaps the classes: the
    weights may have changed since without a version bump (fused Adam updates them in place without
    one; so does ``.data``)."""
    for m in model.modules():
        for name in [n for n in m.__dict__ if n.startswith("_memo_") or n in ("_memory_kv", "_segment_kv")]:
            del m.__dict__[name]


def kept(owner: nn.Module, name: str, key: tuple, make):
    """``make()``, kept under ``name`` for the next call with the same ``key`` while ``reusing(owner)``
    (the model's R and mask in an evaluation: the same for every segment of a length)."""
    return memo(owner, name, key, make) if reusing(owner) else make()


def project_reusing_memory(att: nn.Module, h: torch.Tensor, mem):
    """``RelMultiHeadAttn.project(att, h, mem)`` in an evaluation: if ``mem`` is the memory this layer made in the
    previous segment, under the same autocast state, its keys and values were computed then (as
    the last rows of that segment's k, v: the projection is row by row), so only the segment's own
    rows are projected now. At mem_len 512 and tgt_len 128 that is a fifth of the rows. Otherwise
    the full projection."""
    kept = att.__dict__.get("_memory_kv")
    weights = (att.qkv_net.weight, att.layer_norm.weight, att.layer_norm.bias)
    if (mem is not None and kept is not None and kept[0] is mem
            and kept[1] == (_versions(mem, *weights), autocast_state(mem.device))):
        x = att.layer_norm(h) if att.cfg.pre_lnorm else h
        q, k, val = (att._heads(t) for t in att.qkv_net(x).chunk(3, dim=-1))
        att._segment_kv = (torch.cat([kept[2], k], dim=2), torch.cat([kept[3], val], dim=2), weights)
        return q, *att._segment_kv[:2]
    q, k, val = project_qkv(att, h, mem)
    att._segment_kv = (k, val, weights)
    return q, k, val


def remember_memory_kv(model: nn.Module, mems: list[torch.Tensor]) -> None:
    """After a segment: keep, for each layer, the keys and values of the rows that became its
    new memory (``project_reusing_memory`` uses them next segment, under the same autocast
    state only); forget them otherwise."""
    for layer, mem in zip(model.layers, mems):
        att = layer.dec_attn
        k, val, weights = att.__dict__.pop("_segment_kv", (None, None, None))
        n = mem.size(1)
        att._memory_kv = None
        if reusing(att) and k is not None and 0 < n <= k.size(2):
            key = (_versions(mem, *weights), autocast_state(mem.device))
            att._memory_kv = (mem, key, k[:, :, -n:], val[:, :, -n:])


# ----------------------------------------------------------------------------- the subclasses

class FastAttention(_Fast):
    """Over an attention class of model.py or variants.py (``fast_class``): the projection above,
    and the attention without its probabilities, by the fused routes, unless they are asked for
    (``return_attn``) or re-weighted (adaptive span)."""

    flex = False  # FlexAttention instead (``attend_flex``; ``FastModel.flex_attn`` sets it)

    def project(self, h: torch.Tensor, mem):
        if not _own(self, "project", RelMultiHeadAttn):
            return super().project(h, mem)
        if reusing(self):  # evaluation: the memory's k, v from the last segment
            return project_reusing_memory(self, h, mem)
        if active(self):  # no queries for the memory's rows
            return project_qkv(self, h, mem)
        return super().project(h, mem)

    def attend(self, q, k, val, pos, mask, u, v, return_attn: bool = True):
        if return_attn or not (_own(self, "attend", RelMultiHeadAttn) and _own(self, "reweight", RelMultiHeadAttn)):
            return super().attend(q, k, val, pos, mask, u, v, return_attn)  # the probabilities are needed
        q_u = q if u is None else q + u[:, None]
        own = _own(self, "positional_score", RelMultiHeadAttn)  # not a variant's (Shaw)
        if self.flex and pos is not None and own and not (self.training and self.cfg.dropatt > 0):
            return attend_flex(self, q, q_u, k, val, pos, mask, v), None  # (it drops no attention weights)
        if active(self) and pos is not None and own:
            return attend_rel(self, q, q_u, k, val, pos, mask, v), None
        # otherwise (torch.compile, Shaw's table, the vanilla model) scaled_dot_product_attention, with
        # (b)+(d) and the mask (lowest finite value, as -inf gives NaN in bf16) as the scores' bias
        pos_score = self.positional_score(q, pos, v)
        if pos_score is None:
            bias = mask.logical_not()  # bool: True = may attend
        else:
            bias = (pos_score * self.scale).to(q_u.dtype)
            bias = bias.masked_fill(mask, torch.finfo(bias.dtype).min)
        dropatt = self.cfg.dropatt if self.training else 0.0
        return F.scaled_dot_product_attention(q_u, k, val, attn_mask=bias, dropout_p=dropatt, scale=self.scale), None


class FastModel(_Fast):
    """Over ``TransformerXL``: in an evaluation R and the mask are kept for the next segment of the
    same length (``kept``), the next memory is sliced from what the projections concatenated
    (``sliced_memory``) and its keys and values are kept (``remember_memory_kv``)."""

    def train(self, mode: bool = True):
        """Entering eval mode also forgets what an earlier evaluation kept (the weights may have
        been updated since)."""
        if not mode:
            forget(self)
        return super().train(mode)

    def relative_encoding(self, klen: int) -> torch.Tensor:
        make, inv_freq = super().relative_encoding, self.pos_emb.inv_freq
        if not _own(self, "relative_encoding", TransformerXL):
            return make(klen)
        return kept(self, "R", (klen, self.cfg.clamp_len, inv_freq.dtype, inv_freq.device), lambda: make(klen))

    def mask(self, qlen: int, mlen: int, device: torch.device) -> torch.Tensor:
        make, cfg = super().mask, self.cfg
        if not _own(self, "mask", TransformerXL):
            return make(qlen, mlen, device)
        return kept(self, "mask", (qlen, mlen, cfg.same_length, cfg.mem_len, device), lambda: make(qlen, mlen, device))

    def next_memory(self, hids: list[torch.Tensor], mems) -> list[torch.Tensor]:
        if not active(self) or not _own(self, "next_memory", TransformerXL):
            return super().next_memory(hids, mems)
        new = sliced_memory(self, hids, mems, self.cfg.mem_len)  # (one cat fewer)
        new = super().next_memory(hids, mems) if new is None else new
        remember_memory_kv(self, new)  # evaluation: the new memory's keys and values, for the next segment
        return new

    @property
    def flex_attn(self) -> bool:
        """True: the relative attention through FlexAttention (``attend_flex``: torch >= 2.5; fast
        only under ``torch.compile``); False (the default): the paths above."""
        return any(getattr(m, "flex", False) for m in self.modules())

    @flex_attn.setter
    def flex_attn(self, on: bool) -> None:
        if on and not flex_available():
            raise ValueError(f"flex_attn needs torch.nn.attention.flex_attention (torch >= 2.5), not in torch "
                             f"{torch.__version__}. Fix: upgrade torch, or leave flex_attn off")
        for m in self.modules():
            if isinstance(m, FastAttention):
                m.flex = bool(on)


_CLASSES: dict[type, type] = {nn.Dropout: Dropout}


def fast_class(cls: type) -> type:
    """The fast subclass of ``cls`` (an attention class, ``TransformerXL`` or a subclass of either,
    ``nn.Dropout``), made once; it keeps ``cls``'s name, so that ``print(model)`` reads the same."""
    if cls not in _CLASSES:
        mixin = FastModel if issubclass(cls, TransformerXL) else FastAttention
        _CLASSES[cls] = type(cls.__name__, (mixin, cls), dict(explicit=cls, __module__=__name__))
    return _CLASSES[cls]


def switch(model: nn.Module, on: bool) -> None:
    """``TransformerXL.fast_attn``'s hook: the model, its attention modules and dropouts become their
    fast subclass (on) or their own class again (off). Parameters, buffers and the state dict stay
    as they are; what an evaluation kept is forgotten. A module added to the model later is swapped
    when ``fast_attn`` is set again. ``flex_attn`` is one of these paths: set on an explicit model,
    it takes effect (and is checked) when ``fast_attn`` is switched on."""
    forget(model)
    flex = model.__dict__.pop("flex_attn", None)  # set while explicit: a plain attribute until now
    for m in model.modules():
        cls = type(m).explicit if isinstance(m, _Fast) else type(m)
        if on and (issubclass(cls, (RelMultiHeadAttn, TransformerXL)) or cls is nn.Dropout):
            m.__class__ = fast_class(cls)
        elif not on:
            m.__class__ = cls
    if on and flex is not None:
        model.flex_attn = flex


controls.SPEEDUP = switch
