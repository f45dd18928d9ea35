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

    def batch_lm_avoiding(pad):
        """token ids as unpadded text gives them: never the config's pad id
        (torch's Embedding gives that row no gradient, which the ONNX graph
        cannot say; Gemma's default pad id is 0, OPT's and OLMo 2's 1)."""
        def make():
            ids = torch.randint(0, V - 1, (B, T), generator=gen())
            if pad is not None and 0 <= pad < V:
                ids[ids >= pad] += 1
            return {"input_ids": ids}
        return make

    def custom(cls, cfg_cls, **kw):
        """a causal LM whose config names its sizes its own way: kw gives
        them all (SMALL's names would be ignored)."""
        def make():
            hf = cls(cfg_cls(vocab_size=V, **kw))
            base.log(f"    {cls.__name__}: attn_implementation="
                     f"{hf.config._attn_implementation} kw={kw}")
            return CausalLM(hf)
        pad = cfg_cls(vocab_size=V, **kw).pad_token_id
        return dict(make=lambda: seeded(make), batch=batch_lm_avoiding(pad), ref=True)

    # Families beyond the first eight, each as its default configuration
    # has it (only sizes and dropouts set): partial rotary and parallel
    # attention (Phi, GPT-NeoX, GPT-J, Falcon), fused qkv / gate-up (Phi-3),
    # (1 + w) RMSNorm and scaled embeddings (Gemma), soft-capped
    # logits and alternating sliding windows (Gemma 2), per-head q/k norms
    # (Qwen 3, OLMo 2), learned positions from the attention mask (OPT),
    # ALiBi (BLOOM), multi-query with fused kv (GPTBigCode), positions from
    # the padding (RoBERTa), DistilBERT's own layer names.
    more = {
        "hf_phi": custom(tf.PhiForCausalLM, tf.PhiConfig, **SMALL),
        # Phi-3's default pad id (32000) is past the small vocabulary
        "hf_phi3": custom(tf.Phi3ForCausalLM, tf.Phi3Config, pad_token_id=None, **SMALL),
        # head_dim 8, not the default 256: the fixture stays under 2 MB
        "hf_gemma": custom(tf.GemmaForCausalLM, tf.GemmaConfig, num_key_value_heads=4, head_dim=8,
                           **SMALL),
        "hf_gemma2": custom(tf.Gemma2ForCausalLM, tf.Gemma2Config, num_key_value_heads=2,
                            head_dim=8, sliding_window=8, **SMALL),
        "hf_qwen3": custom(tf.Qwen3ForCausalLM, tf.Qwen3Config, num_key_value_heads=2,
                           head_dim=8, **SMALL),
        "hf_olmo2": custom(tf.Olmo2ForCausalLM, tf.Olmo2Config, **SMALL),
        "hf_granite": custom(tf.GraniteForCausalLM, tf.GraniteConfig, **SMALL),
        "hf_starcoder2": custom(tf.Starcoder2ForCausalLM, tf.Starcoder2Config,
                                num_key_value_heads=2, **SMALL),
        "hf_stablelm": custom(tf.StableLmForCausalLM, tf.StableLmConfig, num_key_value_heads=4,
                              **SMALL),
        "hf_gpt_neox": custom(tf.GPTNeoXForCausalLM, tf.GPTNeoXConfig, **SMALL),
        "hf_falcon": custom(tf.FalconForCausalLM, tf.FalconConfig, hidden_size=32,
                            num_hidden_layers=2, num_attention_heads=4),
        "hf_gptj": custom(tf.GPTJForCausalLM, tf.GPTJConfig, n_positions=64, n_embd=32,
                          n_layer=2, n_head=4, rotary_dim=4),
        "hf_bloom": custom(tf.BloomForCausalLM, tf.BloomConfig, hidden_size=32, n_layer=2,
                           n_head=4),
        # OPT's and GPTBigCode's default dropouts are 0.1; off for the reference
        "hf_opt": custom(tf.OPTForCausalLM, tf.OPTConfig, hidden_size=32, ffn_dim=64,
                         num_hidden_layers=2, num_attention_heads=4, word_embed_proj_dim=32,
                         max_position_embeddings=64, dropout=0.0),
        "hf_gpt_bigcode": custom(tf.GPTBigCodeForCausalLM, tf.GPTBigCodeConfig,
                                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                 **gpt2_small),
    }

    class Seq2Seq(nn.Module):
        """an HF encoder-decoder: the labels shifted right are the decoder's
        inputs (the model does it, with ScatterND); mean cross entropy."""

        def __init__(self, hf):
            super().__init__()
            self.model = hf

        def forward(self, input_ids, labels):
            attention_mask = torch.ones_like(input_ids)
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                labels=labels, use_cache=False).logits
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))

    def batch_seq2seq():
        g = gen()
        # pad (0) and the decoder start token (T5: the pad, BART: 2) never
        # appear as real tokens
        return {"input_ids": torch.randint(3, V, (B, T), generator=g),
                "labels": torch.randint(3, V, (B, T // 2), generator=g)}

    def seq2seq(cls, cfg):
        def make():
            hf = cls(cfg)
            base.log(f"    {cls.__name__}: attn_implementation={hf.config._attn_implementation}")
            return Seq2Seq(hf)
        return dict(make=lambda: seeded(make), batch=batch_seq2seq, ref=True)

    # T5's relative position bias is learned (its attention stays unfused);
    # BART has learned positions with an offset of 2 and an embedding norm.
    more["hf_t5"] = seq2seq(tf.T5ForConditionalGeneration, tf.T5Config(
        vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0))
    more["hf_bart"] = seq2seq(tf.BartForConditionalGeneration, tf.BartConfig(
        vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0))

    def roberta():
        # pad id 0, as the batch pads (the default, 1, would be a real token here)
        hf = tf.RobertaForMaskedLM(tf.RobertaConfig(**bert, pad_token_id=0))
        base.log(f"    Roberta: attn_implementation={hf.config._attn_implementation}")
        return Classifier(hf)

    def distilbert():
        hf = tf.DistilBertForSequenceClassification(tf.DistilBertConfig(
            vocab_size=V, dim=32, hidden_dim=64, n_layers=2, n_heads=4,
            max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
            seq_classif_dropout=0.0, num_labels=3))
        base.log(f"    DistilBert: attn_implementation={hf.config._attn_implementation}")
        return Classifier(hf)

    more["hf_roberta_mlm"] = dict(make=lambda: seeded(roberta), batch=batch_text(True), ref=True)
    more["hf_distilbert_cls"] = dict(make=lambda: seeded(distilbert), batch=batch_text(False),
                                     ref=True)
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
        **more,
    }


def slim(outdir):
    """Drops what the fixtures do not need: the dynamo exporter's per-node
    metadata (stack traces, FX names: ~85% of an opset18 file's bytes; dsc
    reads none of it, and export_torch_models.py's fixtures keep theirs) and
    the float32 gradients (the tests read the float64 ones). The device
    tool carries the whole checkout, so every MiB here is one less for the
    programs a GPU run needs."""
    import onnx
    for fn in sorted(os.listdir(outdir)):
        path = os.path.join(outdir, fn)
        if fn.endswith("_opset18.onnx"):
            m = onnx.load(path)
            for n in m.graph.node:
                del n.metadata_props[:]
            onnx.save(m, path)
    refs = os.path.join(outdir, "ref")
    for name in os.listdir(refs) if os.path.isdir(refs) else []:
        f32 = os.path.join(refs, name, "grads_f32.safetensors")
        if os.path.exists(f32):
            os.remove(f32)


if __name__ == "__main__":
    rc = base.main(build=build_hf_models)
    slim(os.path.abspath(sys.argv[1]))
    sys.exit(rc)
