# Written for this course in the style of the rotary embedding of Llama's implementation in
# Hugging Face transformers: inverse frequencies, their outer product with the positions, the
# angles doubled with cat, cos and sin, and a rotate_half helper.
def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(x, position_ids, base=10000.0):
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    freqs = position_ids[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    if position_ids.dim() == 2:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin
