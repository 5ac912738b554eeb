# Written for this course in the style of nanoGPT's CausalSelfAttention on its manual path (no
# flash attention): heads as (B, nh, T, hs), a lower-triangular mask buffer compared with 0 and
# filled with -inf, softmax, dropout, then the heads side by side and an output projection.
class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.k = nn.Linear(n_embd, n_embd)
        self.q = nn.Linear(n_embd, n_embd)
        self.v = nn.Linear(n_embd, n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        causal = torch.tril(torch.ones(block_size, block_size))
        self.register_buffer("bias", causal.view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        shape = (B, T, self.n_head, C // self.n_head)
        q = self.q(x).view(shape).transpose(1, 2)
        k = self.k(x).view(shape).transpose(1, 2)
        v = self.v(x).view(shape).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)
