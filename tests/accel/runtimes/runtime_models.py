"""The zoo models the runtime tests load (small sizes), with their input specs."""

SOURCES = {
    "mlp": ("zoo:mlp(hidden=128)", None),
    "resnet": ("zoo:resnet(widths=(8, 16, 32), blocks=1)", None),
    "transformer": (
        "zoo:transformer(hidden=64, num_layers=2, ffn=128, vocab_size=500)",
        "input_ids:int64[batch,seq]{0..500}; batch=1..16:2; seq=1..64:16",
    ),
    "lstm": (
        "zoo:lstm(vocab_size=500, embed=32, hidden=64)",
        "tokens:int64[batch,seq]{0..500}; batch=1..16:2; seq=1..64:16",
    ),
}
