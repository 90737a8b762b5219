"""Models as the libraries ship them, small configurations with random weights: torchvision's ViT,
Swin, Swin V2, ConvNeXt, EfficientNet-B0, MobileNetV3, RegNetY, MaxViT, ShuffleNetV2 and MnasNet; timm's
ViT, DeiT (distilled), Swin, ConvNeXt, EfficientNet, ResNet, MobileViT and PoolFormer (GroupNorm);
Hugging Face's GPT-2 (its default SDPA attention and the eager one), Llama (grouped-query
attention), BERT, ViT, DistilBERT, the T5 encoder (relative position buckets), Mistral, Qwen2, Phi,
GPT-NeoX, ALBERT, ConvNeXt, SegFormer, OPT, BLOOM, Swin, Falcon and Gemma (its RMSNorm scales by
1 + weight; its embedding has a padding_idx), returning the logits. A row whose library is not
installed is n/a. torchvision's Swin V2 zeroes the key block of a copy of the qkv bias (a
trained weight written by slice assignment) and runs an MLP over a constant table (its continuous
position bias; a legacy export needs --freeze of that table, a buffer the exporter does not
mark), GPT-Neo alternates global and local attention, MobileBERT pads its tokens shifted by one
(F.pad along the sequence), and BEiT interpolates its relative position bias table to its window (a Resize of a
trained weight to its own size: no element moves). OPT (position ids from a
cumulative sum of ones(batch, T)), BLOOM (ALiBi biases tiled over the batch) and Hugging Face's
Swin (its shifted-window mask expanded over batch x windows; legacy exporter only) train, and so
does GPT-J (its rotary tables split from a gathered sinusoid buffer), and RoBERTa (position ids
a cumulative sum of the ids' padding mask, token types gathered from a zero buffer), Whisper's
encoder (nn.Conv1d), ELECTRA, DeBERTa-v2, XLM-RoBERTa, StableLM, Qwen3, Phi-3 (an empty slice of
its rotary split), MPT (LayerNorm(bias=False)), CLIP's text tower (the state at each sample's
argmax position), timm's LeViT (batch norm over tokens folded into the batch), and the encoder-
decoders BART, mBART, T5, Marian and Pegasus (their decoder ids shifted right by slice
assignment; mBART's start token gathered at each sample's last position), DINOv2 (its position
embeddings interpolated), ConvNeXt V2 (GRN), Hugging Face's Swin V2, YOLOS and DeBERTa; see
docs/model-format.md."""
import torch
import torch.nn as nn

BATCH = 4  # architectures.BATCH


def image(size):
    return lambda g: [("x", torch.randn(BATCH, 3, size, size, generator=g))]


def tokens(g):
    return [("idx", torch.randint(0, 50, (BATCH, 8), generator=g))]


class Logits(nn.Module):
    """A Hugging Face model's logits, or another `field` of its ModelOutput (CLIP's
    text_embeds)."""

    def __init__(self, model, field="logits"):
        super().__init__()
        self.model = model
        self.field = field

    def forward(self, x):
        return getattr(self.model(x), self.field)


def tv_vit():
    import torchvision
    return torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                                num_heads=2, hidden_dim=32, mlp_dim=64,
                                                num_classes=10)


def tv_swin():
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                           window_size=[4, 4], num_classes=10)


def tv_swin_v2():
    # torchvision's swin_v2_t at a small shape: post-norm blocks, cosine attention with a
    # clamped logit scale, and the continuous position bias (an MLP over a constant table of
    # log-spaced coordinates, gathered at the relative position index).
    from torchvision.models import swin_transformer as st
    return st.SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                              window_size=[4, 4], num_classes=10,
                              block=st.SwinTransformerBlockV2,
                              downsample_layer=st.PatchMergingV2)


def tv_convnext():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    return ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10)


def tv_model(name):
    def build():
        import torchvision
        return getattr(torchvision.models, name)(num_classes=10)
    return build


def tv_maxvit():
    from torchvision.models.maxvit import MaxVit
    return MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2, block_channels=[16, 32],
                  block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)


def timm_model(name, **kwargs):
    def build():
        import timm
        return timm.create_model(name, num_classes=10, **kwargs)
    return build


VIT = dict(img_size=32, patch_size=8, depth=2, embed_dim=32, num_heads=2)


def hf_gpt2(attention):
    def build():
        from transformers import GPT2Config, GPT2LMHeadModel
        return Logits(GPT2LMHeadModel(GPT2Config(
            n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=16, bos_token_id=0,
            eos_token_id=0, attn_implementation=attention)))
    return build


def hf_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    return Logits(LlamaForCausalLM(LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=50, max_position_embeddings=16, bos_token_id=0,
        eos_token_id=0)))


def hf_bert():
    from transformers import BertConfig, BertForSequenceClassification
    return Logits(BertForSequenceClassification(BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        vocab_size=50, max_position_embeddings=16, num_labels=3)))


class Hidden(nn.Module):
    """A Hugging Face encoder's last hidden state (T5's encoder has no head)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).last_hidden_state


def hf_causal_lm(model_class, config_class, **config):
    """A decoder of transformers with its LM head, 2 layers of width 32."""
    def build():
        import transformers
        return Logits(getattr(transformers, model_class)(getattr(transformers, config_class)(
            vocab_size=50, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=16,
            bos_token_id=0, eos_token_id=0, **config)))
    return build


def hf_roberta():
    from transformers import RobertaConfig, RobertaForSequenceClassification
    return Logits(RobertaForSequenceClassification(RobertaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        vocab_size=50, max_position_embeddings=16, num_labels=3, pad_token_id=1)))


def hf_whisper_encoder():
    from transformers import WhisperConfig, WhisperModel
    return Hidden(WhisperModel(WhisperConfig(
        vocab_size=50, num_mel_bins=8, d_model=32, encoder_layers=2, encoder_attention_heads=2,
        decoder_layers=1, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=8, max_target_positions=8, pad_token_id=0, bos_token_id=0,
        eos_token_id=0, decoder_start_token_id=0, dropout=0.0)).encoder)


def hf_sequence_classifier(model_class, config_class, **config):
    """An encoder of transformers with a 3-class head, 2 layers of width 32."""
    def build():
        import transformers
        return Logits(getattr(transformers, model_class)(getattr(transformers, config_class)(
            vocab_size=50, max_position_embeddings=16, num_labels=3, hidden_size=32,
            num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, **config)))
    return build


def hf_distilbert():
    from transformers import DistilBertConfig, DistilBertForSequenceClassification
    return Logits(DistilBertForSequenceClassification(DistilBertConfig(
        vocab_size=50, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=16)))


def hf_t5_encoder():
    from transformers import T5Config, T5EncoderModel
    # Its attention calls F.dropout with dropout_rate (no nn.Dropout to set to 0). With 0, torch
    # cannot export it with dynamo (a view of a tensor dropout no longer copies): n/a there.
    return Hidden(T5EncoderModel(T5Config(vocab_size=50, d_model=32, d_kv=8, d_ff=64,
                                          num_layers=2, num_heads=4, dropout_rate=0.0)))


def hf_seq2seq(model_class, config_class, **config):
    """An encoder-decoder of transformers, 2 + 2 layers of width 32, whose decoder reads the ids
    shifted right (shift_tokens_right: slice assignment into a fresh tensor)."""
    def build():
        import transformers
        return Logits(getattr(transformers, model_class)(getattr(transformers, config_class)(
            vocab_size=50, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=16, dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2, **config)))
    return build


class ShiftedT5(nn.Module):
    """T5 with its decoder reading the ids shifted right (T5's own _shift_right), as in training
    with teacher forcing."""
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(input_ids=x, decoder_input_ids=self.model._shift_right(x)).logits


def hf_t5():
    from transformers import T5Config, T5ForConditionalGeneration
    # dropout_rate 0: F.dropout with the config's rate (see hf_t5_encoder).
    return ShiftedT5(T5ForConditionalGeneration(T5Config(
        vocab_size=50, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)))


class ShiftedSeq2Seq(nn.Module):
    """An encoder-decoder whose forward does not shift the ids itself (Marian, Pegasus): the
    decoder reads them shifted by the model's own shift_tokens_right, as in training."""
    def __init__(self, model, shift, pad, start):
        super().__init__()
        self.model, self.shift, self.pad, self.start = model, shift, pad, start

    def forward(self, x):
        return self.model(input_ids=x,
                          decoder_input_ids=self.shift(x, self.pad, self.start)).logits


def hf_shifted_seq2seq(name, model_class, config_class, pad, start):
    def build():
        import importlib
        import transformers
        shift = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(
            vocab_size=50, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=16, dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, pad_token_id=pad, eos_token_id=2, decoder_start_token_id=start))
        return ShiftedSeq2Seq(model, shift.shift_tokens_right, pad, start)
    return build


def hf_dinov2():
    from transformers import Dinov2Config, Dinov2Model
    # Its position embeddings interpolated (bicubic) to the patch grid, here their own size.
    return Hidden(Dinov2Model(Dinov2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)))


def hf_image_classifier(model_class, config_class, **config):
    def build():
        import transformers
        return Logits(getattr(transformers, model_class)(getattr(transformers, config_class)(
            num_labels=10, **config)))
    return build


def hf_yolos():
    from transformers import YolosConfig, YolosModel
    return Hidden(YolosModel(YolosConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=[32, 32], patch_size=8, num_detection_tokens=4, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)))


def hf_albert():
    from transformers import AlbertConfig, AlbertForSequenceClassification
    return Logits(AlbertForSequenceClassification(AlbertConfig(
        vocab_size=50, embedding_size=16, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=16)))


def hf_beit():
    # Its relative position bias table is interpolated (bilinear) to the window: to its own size
    # here, where no element moves. torch cannot export it with dynamo (a view of a
    # non-contiguous tensor): legacy only.
    from transformers import BeitConfig, BeitForImageClassification
    return Logits(BeitForImageClassification(BeitConfig(
        image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, num_labels=10,
        use_relative_position_bias=True, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, drop_path_rate=0.0)))


def hf_gpt_neo():
    # Local attention in every other layer (a window of 4 within the causal mask).
    from transformers import GPTNeoConfig, GPTNeoForCausalLM
    return Logits(GPTNeoForCausalLM(GPTNeoConfig(
        vocab_size=50, num_layers=2, attention_types=[[["global", "local"], 1]], num_heads=2,
        window_size=4, max_position_embeddings=16, hidden_size=32, embed_dropout=0.0,
        attention_dropout=0.0, resid_dropout=0.0, bos_token_id=0, eos_token_id=0)))


def hf_convnext():
    from transformers import ConvNextConfig, ConvNextForImageClassification
    return Logits(ConvNextForImageClassification(ConvNextConfig(
        num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)))


def hf_segformer():
    from transformers import SegformerConfig, SegformerForSemanticSegmentation
    return Logits(SegformerForSemanticSegmentation(SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
        num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], decoder_hidden_size=32,
        num_labels=3)))


def hf_bloom():
    from transformers import BloomConfig, BloomForCausalLM
    return Logits(BloomForCausalLM(BloomConfig(vocab_size=50, hidden_size=32, n_layer=2,
                                               n_head=4)))


def hf_swin():
    from transformers import SwinConfig, SwinForImageClassification
    return Logits(SwinForImageClassification(SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=4,
        num_labels=10)))


def hf_clip_text(eos_token_id):
    """CLIP's text tower: it pools the state at each sample's end-of-text token, found by an
    argmax (of the ids where eos_token_id is 2, as the first CLIP checkpoints; else of ids ==
    eos_token_id)."""
    def build():
        from transformers import CLIPTextConfig, CLIPTextModelWithProjection
        return Logits(CLIPTextModelWithProjection(CLIPTextConfig(
            vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=16, projection_dim=16,
            bos_token_id=0, pad_token_id=1, eos_token_id=eos_token_id)), "text_embeds")
    return build


def hf_vit():
    from transformers import ViTConfig, ViTForImageClassification
    return Logits(ViTForImageClassification(ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=10)))


LIBRARY = [
    ("tv_vit", tv_vit, image(32)),
    ("tv_swin", tv_swin, image(32)),
    ("tv_swin_v2", tv_swin_v2, image(32)),
    ("tv_convnext", tv_convnext, image(32)),
    ("tv_efficientnet", tv_model("efficientnet_b0"), image(32)),
    # 64 pixels: at 32 the last maps are 1 x 1, and batch norm over 4 values is ill-conditioned.
    ("tv_mobilenet_v3", tv_model("mobilenet_v3_small"), image(64)),
    ("tv_regnet", tv_model("regnet_y_400mf"), image(32)),
    ("tv_maxvit", tv_maxvit, image(32)),
    ("timm_vit_tiny", timm_model("vit_tiny_patch16_224", **VIT), image(32)),
    ("timm_deit", timm_model("deit_tiny_distilled_patch16_224", **VIT), image(32)),
    ("timm_swin", timm_model("swin_tiny_patch4_window7_224", img_size=32, window_size=4,
                             embed_dim=16, depths=(2, 2), num_heads=(2, 2)), image(32)),
    ("timm_convnext", timm_model("convnext_atto"), image(32)),
    ("timm_efficientnet", timm_model("efficientnet_b0"), image(32)),
    ("hf_gpt2_sdpa", hf_gpt2("sdpa"), tokens),
    ("hf_gpt2_eager", hf_gpt2("eager"), tokens),
    ("hf_llama", hf_llama, tokens),
    ("hf_bert", hf_bert, tokens),
    ("hf_vit", hf_vit, image(32)),
    ("tv_shufflenet", tv_model("shufflenet_v2_x0_5"), image(32)),
    ("tv_mnasnet", tv_model("mnasnet0_5"), image(32)),
    ("timm_resnet", timm_model("resnet18"), image(32)),
    ("timm_mobilevit", timm_model("mobilevit_xxs"), image(64)),
    ("timm_poolformer", timm_model("poolformer_s12"), image(32)),  # GroupNorm(1, C)
    ("hf_distilbert", hf_distilbert, tokens),
    ("hf_t5_encoder", hf_t5_encoder, tokens),
    ("hf_mistral", hf_causal_lm("MistralForCausalLM", "MistralConfig", hidden_size=32,
                                intermediate_size=64, num_key_value_heads=2, sliding_window=4),
     tokens),
    ("hf_qwen2", hf_causal_lm("Qwen2ForCausalLM", "Qwen2Config", hidden_size=32,
                              intermediate_size=64, num_key_value_heads=4), tokens),
    ("hf_phi", hf_causal_lm("PhiForCausalLM", "PhiConfig", hidden_size=32, intermediate_size=64),
     tokens),
    ("hf_gpt_neox", hf_causal_lm("GPTNeoXForCausalLM", "GPTNeoXConfig", hidden_size=32,
                                 intermediate_size=64), tokens),
    ("hf_albert", hf_albert, tokens),  # one layer's weights shared by every layer
    ("hf_convnext", hf_convnext, image(32)),
    ("hf_beit", hf_beit, image(32)),
    ("hf_gpt_neo", hf_gpt_neo, tokens),
    # Its trigram input pads the shifted tokens (F.pad along the sequence).
    ("hf_mobilebert", hf_sequence_classifier("MobileBertForSequenceClassification",
                                             "MobileBertConfig", embedding_size=16,
                                             intra_bottleneck_size=16), tokens),
    # Decoder ids shifted right by slice assignment (BART: the start id; mBART: each sample's
    # last token, gathered); final_logits_bias a buffer the legacy exporter does not mark.
    ("hf_bart", hf_seq2seq("BartForConditionalGeneration", "BartConfig",
                           decoder_start_token_id=2), tokens),
    ("hf_mbart", hf_seq2seq("MBartForConditionalGeneration", "MBartConfig"), tokens),
    ("hf_t5", hf_t5, tokens),
    ("hf_marian", hf_shifted_seq2seq("marian", "MarianMTModel", "MarianConfig", 1, 1), tokens),
    ("hf_pegasus", hf_shifted_seq2seq("pegasus", "PegasusForConditionalGeneration",
                                      "PegasusConfig", 0, 0), tokens),
    ("hf_dinov2", hf_dinov2, image(32)),
    ("hf_convnextv2", hf_image_classifier("ConvNextV2ForImageClassification", "ConvNextV2Config",
                                          num_stages=2, hidden_sizes=[8, 16], depths=[1, 1],
                                          image_size=32), image(32)),  # GRN
    ("hf_swinv2", hf_image_classifier("Swinv2ForImageClassification", "Swinv2Config",
                                      image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                      num_heads=[2, 2], window_size=4, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0, drop_path_rate=0.0),
     image(32)),
    ("hf_yolos", hf_yolos, image(32)),  # detection tokens beside the patches
    ("hf_deberta", hf_sequence_classifier("DebertaForSequenceClassification", "DebertaConfig",
                                          hidden_dropout_prob=0.0,
                                          attention_probs_dropout_prob=0.0), tokens),
    ("hf_segformer", hf_segformer, image(32)),
    # Position ids from a cumulative sum of ones(batch, T); ALiBi biases tiled over the batch.
    # (OPT calls F.dropout with probabilities from its config, not through nn.Dropout.)
    ("hf_opt", hf_causal_lm("OPTForCausalLM", "OPTConfig", hidden_size=32, ffn_dim=64,
                            word_embed_proj_dim=32, dropout=0.0, attention_dropout=0.0,
                            activation_dropout=0.0, layerdrop=0.0), tokens),
    ("hf_bloom", hf_bloom, tokens),
    # Its shifted-window mask expanded over batch x windows; torch cannot export it with dynamo.
    ("hf_swin", hf_swin, image(32)),
    ("hf_falcon", hf_causal_lm("FalconForCausalLM", "FalconConfig", hidden_size=32), tokens),
    ("hf_gptj", hf_causal_lm("GPTJForCausalLM", "GPTJConfig", n_embd=32, n_layer=2, n_head=4,
                             rotary_dim=4, n_positions=16, resid_pdrop=0.0, embd_pdrop=0.0,
                             attn_pdrop=0.0), tokens),
    ("hf_roberta", hf_roberta, tokens),
    # 8 mel bins over 16 frames (two convolutions, the second of stride 2: 8 positions).
    ("hf_whisper_encoder", hf_whisper_encoder,
     lambda g: [("x", torch.randn(BATCH, 8, 16, generator=g))]),
    ("hf_electra", hf_sequence_classifier("ElectraForSequenceClassification", "ElectraConfig",
                                          embedding_size=16), tokens),
    ("hf_deberta_v2", hf_sequence_classifier("DebertaV2ForSequenceClassification",
                                             "DebertaV2Config"), tokens),
    ("hf_xlm_roberta", hf_sequence_classifier("XLMRobertaForSequenceClassification",
                                              "XLMRobertaConfig", pad_token_id=1), tokens),
    ("hf_stablelm", hf_causal_lm("StableLmForCausalLM", "StableLmConfig", hidden_size=32,
                                 intermediate_size=64, num_key_value_heads=4), tokens),
    ("hf_qwen3", hf_causal_lm("Qwen3ForCausalLM", "Qwen3Config", hidden_size=32,
                              intermediate_size=64, num_key_value_heads=4, head_dim=8), tokens),
    # Its rotary dimension is the whole head: q[..., rotary_dim:] is empty.
    ("hf_phi3", hf_causal_lm("Phi3ForCausalLM", "Phi3Config", hidden_size=32,
                             intermediate_size=64, num_key_value_heads=4, pad_token_id=0), tokens),
    # LayerNorm(bias=False): no shift to train.
    ("hf_mpt", hf_causal_lm("MptForCausalLM", "MptConfig", d_model=32, n_heads=4, n_layers=2,
                            expansion_ratio=2), tokens),
    # BatchNorm1d over tokens folded into the batch; attention biases gathered along axis 1.
    ("timm_levit", timm_model("levit_128s", img_size=32), image(32)),
    # The state at each sample's end-of-text token: x[arange(B), ids.argmax(-1)].
    ("hf_clip_text", hf_clip_text(2), tokens),
    ("hf_clip_text_eos", hf_clip_text(49), tokens),
    ("hf_gemma", hf_causal_lm("GemmaForCausalLM", "GemmaConfig", hidden_size=32,
                              intermediate_size=64, num_key_value_heads=2, head_dim=8), tokens),
]

