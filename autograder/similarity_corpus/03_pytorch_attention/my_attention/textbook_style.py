# Written for this course in the style of a textbook's scaled dot-product attention (as in the
# interactive deep-learning books): matrix products, the scale 1 / sqrt(d), an optional mask,
# softmax over the keys, then the weighted values.
def dot_product_attention(queries, keys, values, mask=None):
    d = queries.shape[-1]
    scores = torch.matmul(queries, keys.transpose(-2, -1)) / math.sqrt(d)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(mask == False, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    attention_weights = nn.functional.softmax(scores, dim=-1)
    return torch.matmul(attention_weights, values)
