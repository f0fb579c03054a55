// GGUF key and tensor names, following llama.cpp's conventions so that files TLR writes load
// in other GGUF runtimes and files from Hugging Face load here (model layer). Header-only.
#pragma once

#include <string>
#include <string_view>

namespace tlr::gguf_keys {

// General.
inline constexpr const char* kArchitecture = "general.architecture";
inline constexpr const char* kName = "general.name";
inline constexpr const char* kAlignment = "general.alignment";
inline constexpr const char* kFileType = "general.file_type";

// Split models (llama.cpp's gguf-split): the shard's index from 0, the number of shards, and
// the tensors in all of them. Files are named PREFIX-%05d-of-%05d.gguf, counting from 1.
inline constexpr const char* kSplitNo = "split.no";
inline constexpr const char* kSplitCount = "split.count";
inline constexpr const char* kSplitTensorsCount = "split.tensors.count";

// Per-architecture hyperparameters: ArchKey("qwen2", kBlockCount) = "qwen2.block_count".
inline constexpr const char* kContextLength = "context_length";
inline constexpr const char* kEmbeddingLength = "embedding_length";
inline constexpr const char* kBlockCount = "block_count";
inline constexpr const char* kFeedForwardLength = "feed_forward_length";
inline constexpr const char* kHeadCount = "attention.head_count";
inline constexpr const char* kHeadCountKv = "attention.head_count_kv";
inline constexpr const char* kRmsEps = "attention.layer_norm_rms_epsilon";
inline constexpr const char* kRopeFreqBase = "rope.freq_base";
inline constexpr const char* kRopeDimensionCount = "rope.dimension_count";
inline constexpr const char* kVocabSize = "vocab_size";

inline std::string ArchKey(std::string_view arch, std::string_view key) {
  return std::string(arch) + "." + std::string(key);
}

// Tokenizer.
inline constexpr const char* kTokModel = "tokenizer.ggml.model";
inline constexpr const char* kTokPre = "tokenizer.ggml.pre";
inline constexpr const char* kTokTokens = "tokenizer.ggml.tokens";
inline constexpr const char* kTokTypes = "tokenizer.ggml.token_type";
inline constexpr const char* kTokScores = "tokenizer.ggml.scores";
inline constexpr const char* kTokMerges = "tokenizer.ggml.merges";
inline constexpr const char* kTokBos = "tokenizer.ggml.bos_token_id";
inline constexpr const char* kTokEos = "tokenizer.ggml.eos_token_id";
inline constexpr const char* kTokEot = "tokenizer.ggml.eot_token_id";
inline constexpr const char* kTokEom = "tokenizer.ggml.eom_token_id";  // Llama 3.1: end of a tool call's message
inline constexpr const char* kTokFimPad = "tokenizer.ggml.fim_pad_token_id";
inline constexpr const char* kTokFimRep = "tokenizer.ggml.fim_rep_token_id";
inline constexpr const char* kTokFimSep = "tokenizer.ggml.fim_sep_token_id";
inline constexpr const char* kTokUnk = "tokenizer.ggml.unknown_token_id";
inline constexpr const char* kTokPad = "tokenizer.ggml.padding_token_id";
inline constexpr const char* kTokAddBos = "tokenizer.ggml.add_bos_token";
inline constexpr const char* kTokAddEos = "tokenizer.ggml.add_eos_token";
inline constexpr const char* kTokAddSpacePrefix = "tokenizer.ggml.add_space_prefix";
inline constexpr const char* kTokChatTemplate = "tokenizer.chat_template";

// Tensors.
inline constexpr const char* kTokenEmbd = "token_embd.weight";
inline constexpr const char* kOutputNorm = "output_norm.weight";
inline constexpr const char* kOutput = "output.weight";
// BlockTensor(3, "attn_q.weight") = "blk.3.attn_q.weight". Block tensor suffixes:
// attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down
// (".weight", and ".bias" for qwen2's attn_q/attn_k/attn_v).
inline std::string BlockTensor(int layer, std::string_view name) {
  return "blk." + std::to_string(layer) + "." + std::string(name);
}

}  // namespace tlr::gguf_keys
