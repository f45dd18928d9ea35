#!/usr/bin/env python3
"""Export small HuggingFace models in their default configuration (default
attention implementation, `sdpa` in transformers 5.x) with their loss, by both
exporters, and write the float64 reference data, with the same machinery as
export_torch_models.py (same output layout, same report).

NOT run in CI (needs torch, transformers, onnxscript, onnxruntime). Made on
the lent device machine:

    NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 \\
        python3 scripts/export_hf_models.py /tmp/hf [names...] 2>&1 | tee log.txt

Only the sizes are small (2 layers, width 32, 4 heads); every other config
value is the family's default, except dropout, which is off where the
reference gradients need it (HF's default dropouts are noted per model). The
loss is written out as F.cross_entropy in the wrapper (HF's own loss helper
casts logits to float32, which would spoil the float64 reference).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_torch_models as base  # noqa: E402

B, T, V = base.B, base.T, 128
SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, max_position_embeddings=64)


def build_hf_models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import transformers as tf

    class CausalLM(nn.Module):
        """logits of an HF causal LM, shifted mean cross entropy."""

        def __init__(self, hf):
            super().__init__()
            self.model = hf

        def forward(self, input_ids):
            # all ones, as a tokenizer gives it for unpadded text
            attention_mask = torch.ones_like(input_ids)
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                use_cache=False).logits
            return F.cross_entropy(logits[:, :-1, :].reshape(-1, logits.size(-1)),
                                   input_ids[:, 1:].reshape(-1))

    class Classifier(nn.Module):
        """an HF encoder with a padding mask; mean cross entropy over labels
        (-100 ignored: masked LM)."""

        def __init__(self, hf):
            super().__init__()
            self.model = hf

        def forward(self, input_ids, attention_mask, labels):
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                   ignore_index=-100)

    class ImageClassifier(nn.Module):
        def __init__(self, hf):
            super().__init__()
            self.model = hf

        def forward(self, pixel_values, labels):
            return F.cross_entropy(self.model(pixel_values=pixel_values).logits, labels)

    def seeded(fn):
        torch.manual_seed(0)
        return fn()

    def causal(cls, cfg_cls, **kw):
        def make():
            cfg = cfg_cls(vocab_size=V, **{**SMALL, **kw})
            hf = cls(cfg)
            base.log(f"    {cls.__name__}: attn_implementation="
                     f"{hf.config._attn_implementation} kw={kw}")
            return CausalLM(hf)
        return lambda: seeded(make)

    def gen():
        return torch.Generator().manual_seed(1234)

    def batch_lm():
        return {"input_ids": torch.randint(0, V, (B, T), generator=gen())}

    def batch_text(mlm):
        def make():
            g = gen()
            # token ids as a tokenizer gives them: real tokens are never the
            # pad id (0), padded positions are. (torch's Embedding gives the
            # padding_idx row no gradient, which the ONNX graph cannot say;
            # with real batches that row gets none from dsc either.)
            ids = torch.randint(1, V, (B, T), generator=g)
            mask = torch.ones(B, T, dtype=torch.long)
            mask[1, T - 5:] = 0  # padded examples
            mask[3, T - 12:] = 0
            ids[mask == 0] = 0
            if mlm:
                labels = torch.full((B, T), -100, dtype=torch.long)
                pick = torch.rand(B, T, generator=g) < 0.25
                labels[pick] = ids[pick]
                labels[mask == 0] = -100
            else:
                labels = torch.randint(0, 3, (B,), generator=g)
            return {"input_ids": ids, "attention_mask": mask, "labels": labels}
        return make

    def batch_image():
        g = gen()
        return {"pixel_values": torch.randn(B, 3, 16, 16, generator=g),
                "labels": torch.randint(0, 5, (B,), generator=g)}

    bert = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=64,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

    def encoder(cls, labels):
        def make():
            hf = cls(tf.BertConfig(**bert, **labels))
            base.log(f"    {cls.__name__}: attn_implementation={hf.config._attn_implementation}")
            return Classifier(hf)
        return lambda: seeded(make)

    def vit():
        hf = tf.ViTForImageClassification(tf.ViTConfig(
            image_size=16, patch_size=4, num_channels=3, hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=4, num_labels=5))
        base.log(f"    ViT: attn_implementation={hf.config._attn_implementation}")
        return ImageClassifier(hf)

    gpt2_small = dict(n_positions=64, n_embd=32, n_layer=2, n_head=4)
    return {
        "hf_llama": dict(make=causal(tf.LlamaForCausalLM, tf.LlamaConfig, num_key_value_heads=2),
                         batch=batch_lm, ref=True),
        "hf_mistral": dict(make=causal(tf.MistralForCausalLM, tf.MistralConfig,
                                       num_key_value_heads=2, sliding_window=8),
                           batch=batch_lm, ref=True),
        "hf_qwen2": dict(make=causal(tf.Qwen2ForCausalLM, tf.Qwen2Config, num_key_value_heads=1),
                         batch=batch_lm, ref=True),
        # GPT-2's default dropouts are 0.1; off here for the gradient reference
        "hf_gpt2_sdpa": dict(make=lambda: seeded(lambda: CausalLM(tf.GPT2LMHeadModel(
            tf.GPT2Config(vocab_size=V, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                          **gpt2_small)))), batch=batch_lm, ref=True),
        "hf_gpt2_sdpa_drop": dict(make=lambda: seeded(lambda: CausalLM(tf.GPT2LMHeadModel(
            tf.GPT2Config(vocab_size=V, **gpt2_small)))), batch=batch_lm, ref=False),
        "hf_bert_cls": dict(make=encoder(tf.BertForSequenceClassification, {"num_labels": 3}),
                            batch=batch_text(False), ref=True),
        "hf_bert_mlm": dict(make=encoder(tf.BertForMaskedLM, {}), batch=batch_text(True), ref=True),
        "hf_vit": dict(make=lambda: seeded(vit), batch=batch_image, ref=True),
    }


if __name__ == "__main__":
    sys.exit(base.main(build=build_hf_models))
