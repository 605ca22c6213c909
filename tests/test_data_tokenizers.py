"""Byte tokenizer, the Hugging Face adapter over a tiny local tokenizer.json, and load_tokenizer."""

from __future__ import annotations

import json
import pickle
import sys

import numpy as np
import pytest

from seqpack.data.schemas import ChatSchema, Message, PromptCompletionSchema
from seqpack.data.tokenize import tokenize_row
from seqpack.data.tokenizers import ByteTokenizer, ChatRendering, Tokenizer, load_tokenizer
from seqpack.core.errors import ConfigError, InputError, UsageError

SPECIALS = ["[UNK]", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
CORPUS = ["hello world", "how are you", "fine thanks", "the answer is yes", "be brief"]


# ----------------------------------------------------------------------------- byte tokenizer
def test_byte_tokenizer_round_trip_and_specials():
    tok = ByteTokenizer()
    assert tok.encode("aé") == [97, 0xC3, 0xA9]
    assert tok.decode([256, 97, 0xC3, 0xA9, 263, 257]) == "<s>aé<|end|></s>"
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.vocab_size) == (256, 257, 258, 264)
    assert tok.fingerprint() == ByteTokenizer().fingerprint() == "byte:byte-chat-v2"
    assert isinstance(tok, Tokenizer) and tok.space_sensitive
    with pytest.raises(UsageError, match="outside"):
        tok.decode([999])


def test_byte_chat_rendering_ownership():
    r = ByteTokenizer().apply_chat_template([Message("user", "a"), Message("assistant", "bc")])
    assert r.ids == [256, 260, 97, 263, 261, 98, 99, 263]
    assert r.owner == [-1, -1, 0, 0, -1, 1, 1, 1]
    assert r.roles == ("user", "assistant")
    with pytest.raises(UsageError):
        ChatRendering(ids=[1, 2], owner=[0], roles=())


# ----------------------------------------------------------------------------- HF adapter
@pytest.fixture()
def hf_dir(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    pytest.importorskip("jinja2")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, tokenizers.trainers.WordLevelTrainer(special_tokens=SPECIALS))
    tok.save(str(tmp_path / "tokenizer.json"))
    config = {"chat_template": TEMPLATE, "bos_token": "<s>", "eos_token": {"content": "</s>"}, "pad_token": "<pad>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def ids_of(tok, *tokens):
    return [tok.backend.token_to_id(t) for t in tokens]


def test_hf_adapter_loads_specials_and_encodes_without_post_processing(hf_dir):
    tok = load_tokenizer(hf_dir / "tokenizer.json")
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 3)  # trainer puts specials first, in order
    assert tok.vocab_size == len(SPECIALS) + len(set(" ".join(CORPUS).split()))
    assert tok.encode("hello world") == ids_of(tok, "hello", "world")
    assert tok.decode(tok.encode("<s>fine")) == "<s> fine"
    assert not tok.space_sensitive  # a whitespace pre-tokenizer swallows spaces
    assert isinstance(tok, Tokenizer)
    assert load_tokenizer(hf_dir).fingerprint() == tok.fingerprint()  # folder or file: same tokenizer


def test_hf_batch_encoders_give_the_ids_of_encode(hf_dir):
    tok = load_tokenizer(hf_dir)
    texts = ["hello world", "", "fine <s> hello", " ", "world world"]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]
    ids, lengths = tok.encode_batch_flat(texts)
    assert ids.dtype == lengths.dtype == np.int64
    assert lengths.tolist() == [len(tok.encode(t)) for t in texts]
    assert ids.tolist() == [i for t in texts for i in tok.encode(t)]
    empty_ids, empty_lengths = tok.encode_batch_flat([])
    assert empty_ids.size == 0 and empty_lengths.size == 0


def test_hf_fingerprint_changes_with_template(hf_dir):
    before = load_tokenizer(hf_dir).fingerprint()
    cfg = json.loads((hf_dir / "tokenizer_config.json").read_text())
    cfg["chat_template"] = TEMPLATE + " "
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert load_tokenizer(hf_dir).fingerprint() != before


def test_hf_prompt_completion_drops_separator_space(hf_dir):
    tok = load_tokenizer(hf_dir)
    s = tokenize_row({"prompt": "how are you", "completion": "fine thanks"}, PromptCompletionSchema(add_bos=True), tok,
                     max_length=32)
    assert s.input_ids.tolist() == ids_of(tok, "<s>", "how", "are", "you", "fine", "thanks", "</s>")
    assert s.loss_mask.tolist() == [0, 0, 0, 0, 1, 1, 1]


def test_hf_chat_template_assistant_mask_by_prefix_rendering(hf_dir):
    tok = load_tokenizer(hf_dir)
    row = {"messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello world"},
        {"role": "assistant", "content": "fine thanks"},
        {"role": "user", "content": "how are you"},
        {"role": "assistant", "content": "yes"},
    ]}
    expected_tokens = ["<s>", "<|system|>", "be", "brief", "<|end|>", "<|user|>", "hello", "world", "<|end|>",
                       "<|assistant|>", "fine", "thanks", "<|end|>", "<|user|>", "how", "are", "you", "<|end|>",
                       "<|assistant|>", "yes", "<|end|>"]
    s = tokenize_row(row, ChatSchema(), tok, max_length=64)
    assert s.input_ids.tolist() == ids_of(tok, *expected_tokens)
    assert s.loss_mask.tolist() == [1 if i in (10, 11, 12, 19, 20) else 0 for i in range(21)]
    last = tokenize_row(row, ChatSchema(loss_mode="last_turn"), tok, max_length=64)
    assert last.loss_mask.tolist() == [1 if i in (19, 20) else 0 for i in range(21)]
    assert last.prompt_length == 19


def test_hf_byte_level_bpe_trains_the_word_that_absorbs_the_header_space(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    pytest.importorskip("jinja2")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(special_tokens=SPECIALS[1:], vocab_size=300,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["so fine thanks", "say hello world"] * 5, trainer)  # learns "Ġfine", "Ġhello"
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "bos_token": "<s>"}))
    hf = load_tokenizer(tmp_path)
    assert hf.space_sensitive
    r = hf.apply_chat_template([Message("user", "hello world"), Message("assistant", "fine thanks")])
    pieces = [hf.backend.id_to_token(i) for i in r.ids]
    assert pieces[pieces.index("<|assistant|>") + 1] == "Ġfine"  # header space merged into the first word
    trained = [i for i, k in zip(r.ids, r.owner) if k == 1]
    assert hf.decode(trained) == " fine thanks <|end|>"  # ... and that token is still trained; the space after is not
    # a non-assistant message owns its own text; BOS, headers and end markers of other turns belong to nobody
    assert hf.decode([i for i, k in zip(r.ids, r.owner) if k == 0]).strip() == "hello world"
    assert r.owner[0] == -1 and pieces[0] == "<s>" and r.method == "sentinel"


def test_hf_template_that_is_not_prefix_stable_is_attributed(hf_dir):
    cfg = json.loads((hf_dir / "tokenizer_config.json").read_text())
    # the last turn gets a different header than earlier ones: rendering a prefix is not a prefix
    cfg["chat_template"] = (
        "{% for m in messages %}{% if loop.last %}<|assistant|> {% else %}<|user|> {% endif %}"
        "{{ m['content'] }} <|end|> {% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}"
    )
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = load_tokenizer(hf_dir)
    msgs = [Message("user", "hello"), Message("assistant", "fine thanks"), Message("user", "how are you"),
            Message("assistant", "yes")]
    assert tok.prefix_regions(msgs) is None  # the old prefix method cannot do this template
    r = tok.apply_chat_template(msgs)
    assert r.method == "sentinel"
    assert tok.decode([i for i, k in zip(r.ids, r.owner) if k == 3]) == "yes <|end|>"
    assert tok.decode([i for i, k in zip(r.ids, r.owner) if k == 1]) == "fine thanks <|end|>"


def test_hf_template_errors(hf_dir):
    cfg = json.loads((hf_dir / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('must start with user') }}{% endif %}"
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="must start with user"):
        load_tokenizer(hf_dir).render([Message("assistant", "yes")])
    cfg["chat_template"] = "{% for m in messages %}"
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="does not compile"):
        load_tokenizer(hf_dir).render([Message("user", "hi")])
    del cfg["chat_template"]
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="no chat_template"):
        load_tokenizer(hf_dir).apply_chat_template([Message("user", "hi")])
    (hf_dir / "chat_template.jinja").write_text(TEMPLATE)
    assert load_tokenizer(hf_dir).render([Message("user", "hi")]) == "<s><|user|> hi <|end|> "


def test_hf_special_token_not_in_vocab(hf_dir):
    (hf_dir / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>"}))
    with pytest.raises(InputError, match="not in the vocabulary") as info:
        load_tokenizer(hf_dir)
    assert info.value.field == "eos_token"


def test_hf_tokenizer_pickles(hf_dir):
    tok = load_tokenizer(hf_dir)
    tok.render([Message("user", "hi")])  # compiles the template
    clone = pickle.loads(pickle.dumps(tok))
    msgs = [Message("user", "hi"), Message("assistant", "yes")]
    assert clone.apply_chat_template(msgs) == tok.apply_chat_template(msgs)


def test_hf_missing_extra_names_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # makes `import tokenizers` fail
    with pytest.raises(UsageError, match="'hf' extra") as info:
        load_tokenizer(tmp_path)
    assert "seqpack[hf]" in str(info.value)


def test_load_tokenizer_specs(tmp_path):
    assert isinstance(load_tokenizer(None), ByteTokenizer)
    assert isinstance(load_tokenizer("byte"), ByteTokenizer)
    tok = ByteTokenizer()
    assert load_tokenizer(tok) is tok
    with pytest.raises(UsageError, match="cannot make a tokenizer"):
        load_tokenizer(3)
    pytest.importorskip("tokenizers")
    with pytest.raises(UsageError, match="not found"):
        load_tokenizer(tmp_path / "missing.json")
