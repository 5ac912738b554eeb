"""Audit bank of assignment 03: each item's catalogued mistakes, and correct answers written
another way (see autograder/commands/audit.py).

A mistake sits in the item whose own code makes it. SelfAttentionHead and
MultiheadedSelfAttention call the student's my_attention in the solution; their scoring
mistakes (softmax, scaling, mask fill) are written as answers that compute the attention
themselves, inline, which the notebook allows, so that the mistake is in that item's code and
my_attention stays right.
"""

# --- my_attention --------------------------------------------------------------------------------

SCORES = "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])"
BOOL_FILL = 'scores = scores.masked_fill(~attn_mask, float("-inf"))'
SOFTMAX = "weights = torch.softmax(scores, dim=-1)"
RETURN = "return weights @ v"

# --- SelfAttentionHead ---------------------------------------------------------------------------

HEAD_CALL = "return my_attention(queries, keys, values, attn_mask=mask)   # (..., seq, model_dim)"


def head_inline(scale="/ math.sqrt(self.qk_dim)", fill='masked_fill(~mask, float("-inf"))', dim="-1", float_mask=True):
    """SelfAttentionHead.forward computing the attention itself, with one piece swapped (or, without
    ``float_mask``, left out: the branch that adds a float mask)."""
    return ("scores = queries @ keys.transpose(-2, -1) " + scale + "   # (..., seq, seq)\n"
            "        if mask is not None and mask.dtype == torch.bool:\n"
            "            scores = scores." + fill + "\n"
            + ("        elif mask is not None:\n"
               "            scores = scores + mask\n" if float_mask else "") +
            "        weights = torch.softmax(scores, dim=" + dim + ")\n"
            "        return weights @ values   # (..., seq, model_dim)")


# --- MultiheadedSelfAttention --------------------------------------------------------------------

MHA_CALL = "heads = my_attention(q, k, v, attn_mask=attn_mask)"
SPLIT_Q = "q = self.q_proj(input).view(split).transpose(1, 2)"
SPLIT_K = "k = self.k_proj(input).view(split).transpose(1, 2)"
SPLIT_V = "v = self.v_proj(input).view(split).transpose(1, 2)"
MERGE = "merged = heads.transpose(1, 2).contiguous().view(batch, seq, self.model_dim)"
MHA_RETURN = "return self.out_proj(merged)"


def mha_inline(scale="/ math.sqrt(self.head_dim)", fill='masked_fill(~attn_mask, float("-inf"))', dim="-1",
               float_mask=True):
    """MultiheadedSelfAttention.forward computing the heads' attention itself, with one piece swapped
    (or, without ``float_mask``, left out: the branch that adds a float mask)."""
    return ("scores = q @ k.transpose(-2, -1) " + scale + "   # (B, H, T, T)\n"
            "        if attn_mask is not None and attn_mask.dtype == torch.bool:\n"
            "            scores = scores." + fill + "\n"
            + ("        elif attn_mask is not None:\n"
               "            scores = scores + attn_mask\n" if float_mask else "") +
            "        heads = torch.softmax(scores, dim=" + dim + ") @ v")


# --- TransformerDecoderLayer ---------------------------------------------------------------------

CAUSAL = "allowed = torch.ones(seq, seq, dtype=torch.bool, device=input.device).tril()"
SA_DROPOUT = "return self.dropout1(self.self_attn(x, attn_mask=allowed))"
PRE_NORM_SA = "x = x + sa(self.norm1(x))"
POST_NORM_SA = "x = self.norm1(x + sa(x))"
LEFT_ON = "F.dropout(self.self_attn({}, attn_mask=allowed), p=self.dropout1.p)"


def mutants(answer):
    return {
        "my_attention": {
            "softmax_wrong_dim": answer("my_attention", (SOFTMAX, "weights = torch.softmax(scores, dim=-2)")),
            "no_scaling": answer("my_attention", (SCORES, "scores = q @ k.transpose(-2, -1)")),
            "mask_filled_with_zero": answer("my_attention", (BOOL_FILL,
                                                             "scores = scores.masked_fill(~attn_mask, 0.0)")),
            "inverted_mask": answer("my_attention", (BOOL_FILL,
                                                     'scores = scores.masked_fill(attn_mask, float("-inf"))')),
            "mask_after_softmax": answer("my_attention", (BOOL_FILL, "scores = scores + 0.0"),
                                         (SOFTMAX, SOFTMAX + "\n    if attn_mask is not None and attn_mask.dtype == torch.bool:\n"
                                                   "        weights = weights.masked_fill(~attn_mask, 0.0)")),
            "float_mask_ignored": answer("my_attention", ("scores = scores + attn_mask", "pass")),
            "squeezed_size_one": answer("my_attention", (RETURN, "return (weights @ v).squeeze()")),
        },
        "self_attention_head": {
            "softmax_wrong_dim": answer("self_attention_head", (HEAD_CALL, head_inline(dim="-2"))),
            "no_scaling": answer("self_attention_head", (HEAD_CALL, head_inline(scale=""))),
            "mask_filled_with_zero": answer("self_attention_head", (HEAD_CALL,
                                                                    head_inline(fill="masked_fill(~mask, 0.0)"))),
            "inverted_mask": answer("self_attention_head", (HEAD_CALL,
                                                            head_inline(fill='masked_fill(mask, float("-inf"))'))),
            "float_mask_ignored": answer("self_attention_head", (HEAD_CALL, head_inline(float_mask=False))),
            "squeezed_size_one": answer("self_attention_head", (HEAD_CALL, HEAD_CALL.replace("mask)", "mask).squeeze()"))),
        },
        "multiheaded_self_attention": {
            "softmax_wrong_dim": answer("multiheaded_self_attention", (MHA_CALL, mha_inline(dim="-2"))),
            "no_scaling": answer("multiheaded_self_attention", (MHA_CALL, mha_inline(scale=""))),
            "scaled_by_model_width": answer("multiheaded_self_attention",
                                            (MHA_CALL, mha_inline(scale="/ math.sqrt(self.model_dim)"))),
            "mask_filled_with_zero": answer("multiheaded_self_attention",
                                            (MHA_CALL, mha_inline(fill="masked_fill(~attn_mask, 0.0)"))),
            # nn.MultiheadAttention's convention (True blocks), which this layer loads its weights from.
            "inverted_mask": answer("multiheaded_self_attention", (
                MHA_CALL,
                "if attn_mask is not None and attn_mask.dtype == torch.bool:\n"
                "            attn_mask = ~attn_mask\n"
                "        " + MHA_CALL)),
            "split_heads_without_transpose": answer(
                "multiheaded_self_attention",
                (SPLIT_Q, "q = self.q_proj(input).view(batch, self.num_heads, seq, self.head_dim)"),
                (SPLIT_K, "k = self.k_proj(input).view(batch, self.num_heads, seq, self.head_dim)"),
                (SPLIT_V, "v = self.v_proj(input).view(batch, self.num_heads, seq, self.head_dim)")),
            "merge_heads_without_transpose": answer(
                "multiheaded_self_attention", (MERGE, "merged = heads.contiguous().view(batch, seq, self.model_dim)")),
            "missing_output_projection": answer("multiheaded_self_attention", (MHA_RETURN, "return merged")),
            "float_mask_ignored": answer("multiheaded_self_attention", (MHA_CALL, mha_inline(float_mask=False))),
            "squeezed_size_one": answer("multiheaded_self_attention", (MHA_RETURN, MHA_RETURN + ".squeeze()")),
        },
        "transformer_decoder_layer": {
            "mask_hides_diagonal": answer("transformer_decoder_layer", (
                CAUSAL, "allowed = torch.ones(seq, seq, dtype=torch.bool, device=input.device).tril(diagonal=-1)")),
            "mask_leaks_next_token": answer("transformer_decoder_layer", (
                CAUSAL, "allowed = torch.ones(seq, seq, dtype=torch.bool, device=input.device).tril(diagonal=1)")),
            # nn.TransformerEncoderLayer's convention: True above the diagonal, where a key is blocked
            "inverted_mask": answer("transformer_decoder_layer", (
                CAUSAL, "allowed = torch.ones(seq, seq, dtype=torch.bool, device=input.device).triu(diagonal=1)")),
            "dropout_in_eval": answer("transformer_decoder_layer", (
                SA_DROPOUT, "return F.dropout(self.self_attn(x, attn_mask=allowed), p=self.dropout1.p)")),
            # each order of the LayerNorms written out, and F.dropout left on in one of them only
            "dropout_in_eval: pre-norm": answer("transformer_decoder_layer", (
                PRE_NORM_SA, "x = x + " + LEFT_ON.format("self.norm1(x)"))),
            "dropout_in_eval: post-norm": answer("transformer_decoder_layer", (
                POST_NORM_SA, "x = self.norm1(x + " + LEFT_ON.format("x") + ")")),
            "squeezed_size_one": answer("transformer_decoder_layer", ("        return x\n", "        return x.squeeze()\n")),
        },
    }


def alternatives(answer):
    return {
        "my_attention": [
            ("einsum scores", answer("my_attention", (
                SCORES, "scores = torch.einsum('...qd,...kd->...qk', q, k) / math.sqrt(q.shape[-1])"))),
            ("scale the queries first, matmul and mT", answer("my_attention", (
                SCORES, "scores = torch.matmul(q / math.sqrt(q.shape[-1]), k.mT)"))),
            ("fill with torch.finfo(dtype).min", answer("my_attention", (
                BOOL_FILL, "scores = scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min)"))),
            ("torch.where for the boolean mask", answer("my_attention", (
                BOOL_FILL, 'scores = torch.where(attn_mask, scores, torch.tensor(float("-inf")))'))),
            ("boolean mask made additive", answer("my_attention", (
                BOOL_FILL,
                ('attn_mask = torch.zeros(attn_mask.shape, dtype=scores.dtype).masked_fill(~attn_mask, float("-inf"))\n'
                 "        scores = scores + attn_mask")))),
            ("softmax by hand", answer("my_attention", (
                SOFTMAX,
                ("shifted = scores - scores.amax(dim=-1, keepdim=True)\n"
                 "    weights = shifted.exp() / shifted.exp().sum(dim=-1, keepdim=True)")))),
            ("float64 inside, then back", answer("my_attention", (
                SCORES, "scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])"), (
                "scores = scores + attn_mask", "scores = scores + attn_mask.double()"), (
                RETURN, "return (weights @ v.double()).to(q.dtype)"))),
        ],
        "self_attention_head": [
            ("attention inline, without my_attention", answer("self_attention_head", (HEAD_CALL, head_inline()))),
            ("F.linear with the layers' weights", answer(
                "self_attention_head",
                ("queries = self.Q(input)", "queries = F.linear(input, self.Q.weight, self.Q.bias)"),
                ("keys = self.K(input)", "keys = F.linear(input, self.K.weight, self.K.bias)"),
                ("values = self.V(input)", "values = F.linear(input, self.V.weight, self.V.bias)"))),
            ("x @ W.T + b, mask by position", answer(
                "self_attention_head",
                ("queries = self.Q(input)", "queries = input @ self.Q.weight.T + self.Q.bias"),
                ("keys = self.K(input)", "keys = input @ self.K.weight.T + self.K.bias"),
                ("values = self.V(input)", "values = input @ self.V.weight.T + self.V.bias"),
                (HEAD_CALL, "return my_attention(queries, keys, values, mask)"))),
            ("inline with einsum, torch.where and the scale on the queries", answer("self_attention_head", (
                HEAD_CALL,
                ("scores = torch.einsum('...qd,...kd->...qk', queries * self.qk_dim ** -0.5, keys)\n"
                 "        if mask is not None and mask.dtype == torch.bool:\n"
                 "            scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)\n"
                 "        elif mask is not None:\n"
                 "            scores = scores + mask\n"
                 "        return torch.einsum('...qk,...kd->...qd', scores.softmax(dim=-1), values)")))),
        ],
        "multiheaded_self_attention": [
            ("reshape and permute", answer(
                "multiheaded_self_attention",
                (SPLIT_Q, "q = self.q_proj(input).reshape(split).permute(0, 2, 1, 3)"),
                (SPLIT_K, "k = self.k_proj(input).reshape(split).permute(0, 2, 1, 3)"),
                (SPLIT_V, "v = self.v_proj(input).reshape(split).permute(0, 2, 1, 3)"),
                (MERGE, "merged = heads.permute(0, 2, 1, 3).reshape(batch, seq, self.model_dim)"))),
            ("a loop over the heads", answer("multiheaded_self_attention", (
                "        split = (batch, seq, self.num_heads, self.head_dim)\n"
                "        " + SPLIT_Q + "   # (B, T, model_dim) -> (B, T, H, hd) -> (B, H, T, hd)\n"
                "        " + SPLIT_K + "   # (B, H, T, hd)\n"
                "        " + SPLIT_V + "   # (B, H, T, hd)\n"
                "        " + MHA_CALL + "   # (B, H, T, hd); the mask broadcasts over B and H\n"
                "        " + MERGE + "   # (B, T, model_dim)\n",
                ("        q, k, v = self.q_proj(input), self.k_proj(input), self.v_proj(input)\n"
                 "        outputs = []\n"
                 "        for h in range(self.num_heads):\n"
                 "            part = slice(h * self.head_dim, (h + 1) * self.head_dim)\n"
                 "            outputs.append(my_attention(q[..., part], k[..., part], v[..., part], attn_mask))\n"
                 "        merged = torch.cat(outputs, dim=-1)\n")))),
            ("one fused qkv projection", answer(
                "multiheaded_self_attention",
                (("        self.q_proj = nn.Linear(model_dim, model_dim)"
                 "     # weight (model_dim, model_dim): all heads' queries\n"
                  "        self.k_proj = nn.Linear(model_dim, model_dim)\n"
                  "        self.v_proj = nn.Linear(model_dim, model_dim)\n"),
                 "        self.qkv = nn.Linear(model_dim, 3 * model_dim)\n"),
                (SPLIT_Q, "q, k, v = (t.view(split).transpose(1, 2) for t in self.qkv(input).chunk(3, dim=-1))"),
                ("        " + SPLIT_K + "   # (B, H, T, hd)\n", ""),
                ("        " + SPLIT_V + "   # (B, H, T, hd)\n", ""),
                (("        w_q, w_k, w_v = mha.in_proj_weight.chunk(3, dim=0)   # three (model_dim, model_dim) blocks\n"
                 "        b_q, b_k, b_v = mha.in_proj_bias.chunk(3, dim=0)     # three (model_dim,) blocks\n"
                  "        pairs = ((self.q_proj, w_q, b_q), (self.k_proj, w_k, b_k), (self.v_proj, w_v, b_v),\n"
                  "                 (self.out_proj, mha.out_proj.weight, mha.out_proj.bias))\n"),
                 ("        pairs = ((self.qkv, mha.in_proj_weight, mha.in_proj_bias),\n"
                 "                 (self.out_proj, mha.out_proj.weight, mha.out_proj.bias))\n")))),
            ("inline einsum attention, unflatten and a finfo fill", answer(
                "multiheaded_self_attention",
                (SPLIT_Q, "q = self.q_proj(input).unflatten(-1, (self.num_heads, -1)).transpose(-3, -2)"),
                (SPLIT_K, "k = self.k_proj(input).unflatten(-1, (self.num_heads, -1)).transpose(-3, -2)"),
                (SPLIT_V, "v = self.v_proj(input).unflatten(-1, (self.num_heads, -1)).transpose(-3, -2)"),
                (MHA_CALL,
                 ("scores = torch.einsum('bhqd,bhkd->bhqk', q, k) / self.head_dim ** 0.5\n"
                  "        if attn_mask is not None and attn_mask.dtype == torch.bool:\n"
                  "            scores = scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min)\n"
                  "        elif attn_mask is not None:\n"
                  "            scores = scores + attn_mask\n"
                  "        heads = torch.einsum('bhqk,bhkd->bhqd', torch.softmax(scores, dim=-1), v)")),
                (MERGE, "merged = heads.transpose(-3, -2).flatten(-2)"))),
            ("load by slicing into .data and load_state_dict", answer("multiheaded_self_attention", (
                ("        w_q, w_k, w_v = mha.in_proj_weight.chunk(3, dim=0)   # three (model_dim, model_dim) blocks\n"
                 "        b_q, b_k, b_v = mha.in_proj_bias.chunk(3, dim=0)     # three (model_dim,) blocks\n"
                 "        pairs = ((self.q_proj, w_q, b_q), (self.k_proj, w_k, b_k), (self.v_proj, w_v, b_v),\n"
                 "                 (self.out_proj, mha.out_proj.weight, mha.out_proj.bias))\n"
                 "        with torch.no_grad():\n"
                 "            for layer, weight, bias in pairs:\n"
                 "                layer.weight.copy_(weight)\n"
                 "                layer.bias.copy_(bias)\n"),
                ("        d = self.model_dim\n"
                 "        for i, layer in enumerate((self.q_proj, self.k_proj, self.v_proj)):\n"
                 "            layer.weight.data = mha.in_proj_weight.data[i * d:(i + 1) * d].clone()\n"
                 "            layer.bias.data = mha.in_proj_bias.data[i * d:(i + 1) * d].clone()\n"
                 "        self.out_proj.load_state_dict(mha.out_proj.state_dict())\n")))),
        ],
        "transformer_decoder_layer": [
            ("a float causal mask, 0 and -inf", answer("transformer_decoder_layer", (
                CAUSAL,
                ("future = torch.ones(seq, seq, dtype=torch.bool, device=input.device).triu(diagonal=1)\n"
                 '        allowed = torch.zeros(seq, seq, device=input.device).masked_fill(future, float("-inf"))')))),
            ("mask from an arange comparison", answer("transformer_decoder_layer", (
                CAUSAL,
                ("positions = torch.arange(seq, device=input.device)\n"
                 "        allowed = positions[:, None] >= positions[None, :]")))),
            ("F.dropout with training=self.training, straight-line forward", answer("transformer_decoder_layer", (
                ("        def sa(x):                                     # (B, T, model_dim) -> (B, T, model_dim)\n"
                 "            return self.dropout1(self.self_attn(x, attn_mask=allowed))\n"
                 "\n"
                 "        def ff(x):                                     "
                 "# (B, T, model_dim) -> (B, T, ff_dim) -> (B, T, model_dim)\n"
                 "            return self.dropout2(self.linear2(self.dropout(torch.relu(self.linear1(x)))))\n"
                 "\n"
                 "        x = input\n"
                 "        if self.norm_first:\n"
                 "            x = x + sa(self.norm1(x))\n"
                 "            x = x + ff(self.norm2(x))\n"
                 "        else:\n"
                 "            x = self.norm1(x + sa(x))\n"
                 "            x = self.norm2(x + ff(x))\n"
                 "        return x\n"),
                ("        p, training = self.dropout1.p, self.training\n"
                 "        x = input\n"
                 "        h = self.norm1(x) if self.norm_first else x\n"
                 "        h = F.dropout(self.self_attn(h, allowed), p, training=training)\n"
                 "        x = x + h if self.norm_first else self.norm1(x + h)\n"
                 "        h = self.norm2(x) if self.norm_first else x\n"
                 "        h = F.dropout(F.relu(self.linear1(h)), p, training=training)\n"
                 "        h = F.dropout(self.linear2(h), p, training=training)\n"
                 "        return x + h if self.norm_first else self.norm2(x + h)\n")))),
            ("an nn.Sequential feed-forward, loaded with load_state_dict", answer(
                "transformer_decoder_layer",
                (("        self.linear1 = nn.Linear(model_dim, ff_dim)    # (..., model_dim) -> (..., ff_dim)\n"
                 "        self.linear2 = nn.Linear(ff_dim, model_dim)    # (..., ff_dim) -> (..., model_dim)\n"),
                 ("        self.ff = nn.Sequential(nn.Linear(model_dim, ff_dim), nn.ReLU(), nn.Dropout(dropout),\n"
                 "                                nn.Linear(ff_dim, model_dim), nn.Dropout(dropout))\n")),
                ("return self.dropout2(self.linear2(self.dropout(torch.relu(self.linear1(x)))))",
                 "return self.ff(x)"),
                (("        with torch.no_grad():\n"
                 '            for name in ("linear1", "linear2", "norm1", "norm2"):\n'
                  "                mine, theirs = getattr(self, name), getattr(layer, name)\n"
                  "                mine.weight.copy_(theirs.weight)\n"
                  "                mine.bias.copy_(theirs.bias)\n"),
                 ("        self.ff[0].load_state_dict(layer.linear1.state_dict())\n"
                 "        self.ff[3].load_state_dict(layer.linear2.state_dict())\n"
                  "        self.norm1.load_state_dict(layer.norm1.state_dict())\n"
                  "        self.norm2.load_state_dict(layer.norm2.state_dict())\n")))),
        ],
    }


KNOWN_GAPS = {}


def library(answer):
    return {
        "my_attention": [
            ("F.scaled_dot_product_attention", answer("my_attention", (
                RETURN, "return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)"))),
            ("torch.ops.aten", answer("my_attention", (
                RETURN, "return torch.ops.aten.scaled_dot_product_attention(q, k, v, attn_mask)"))),
        ],
        "multiheaded_self_attention": [
            ("SDPA in place of my_attention", answer("multiheaded_self_attention", (
                MHA_CALL, "heads = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)"))),
        ],
    }
