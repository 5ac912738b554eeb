# Written for this course in the style of the MultiHeadAttention of the book chapter that
# assignment 01 follows, as it is reposted: each projection viewed as heads and transposed, an
# in-place -torch.inf fill of the boolean mask, the heads merged with transpose, contiguous and
# view, then an output projection.
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        n_batch, n_tokens, _ = x.shape
        heads = (n_batch, n_tokens, self.num_heads, self.head_dim)
        q = self.W_query(x).view(*heads).transpose(1, 2)
        k = self.W_key(x).view(*heads).transpose(1, 2)
        v = self.W_value(x).view(*heads).transpose(1, 2)
        scores = q @ k.transpose(2, 3)
        scores.masked_fill_(self.mask.bool()[:n_tokens, :n_tokens], -torch.inf)
        weights = self.dropout(torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1))
        merged = (weights @ v).transpose(1, 2).contiguous().view(n_batch, n_tokens, self.d_out)
        return self.out_proj(merged)
