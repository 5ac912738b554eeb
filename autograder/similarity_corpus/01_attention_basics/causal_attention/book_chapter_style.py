# Written for this course in the style of the CausalAttention of the book chapter that assignment 01
# follows, as blog posts and notebooks repeat it: an upper-triangular mask buffer of ones, made
# boolean and filled in place with -torch.inf, softmax scaled by the square root of the keys' width,
# then dropout on the weights.
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        upper = torch.triu(torch.ones(context_length, context_length), diagonal=1)
        self.register_buffer("mask", upper)

    def forward(self, x):
        n_batch, n_tokens, _ = x.shape
        q = self.W_query(x)
        k = self.W_key(x)
        v = self.W_value(x)
        scores = q @ k.transpose(1, 2)
        scores.masked_fill_(self.mask.bool()[:n_tokens, :n_tokens], -torch.inf)
        weights = self.dropout(torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1))
        return weights @ v
