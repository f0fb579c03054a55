// Types of TLR's browser module (tlr.js).
export interface Token {
  id: number;
  text: string;
  source: 'SLM' | 'LLM' | 'FALLBACK';
  /** The router's confidence in the SLM's token; -1 when it did not run. */
  confidence: number;
  end: boolean;
  llm_ms: number;
  at_ms: number;
  /** FALLBACK tokens: why the LLM call failed. */
  llm_error?: string;
}
export interface Stats {
  prompt_tokens: number; prompt_reused: number; generated: number; routed: number; fallbacks: number;
  llm_calls: number; stop: 'eos' | 'max_tokens' | 'callback' | 'cancelled'; threshold: number;
  ttft_ms: number; tbt_ms: number; total_ms: number; slm_ms: number; router_ms: number; llm_ms: number;
  stall_ms: number; http_requests: number; retries: number; failed_calls: number; llm_failure: string;
  /** The LLM's work: tokens it prefilled and generated, its forward time where reported (-1 otherwise). */
  llm_prefilled: number; llm_generated: number; llm_forward_ms: number;
  /** Derived as everywhere else TLR writes a generation's statistics (docs/guide.md). */
  routed_pct: number; llm_generated_per_routed: number;
  /** The pipeline: routed positions a call answered, how many kept speculative work, lookahead drafts used. */
  spec_resolved: number; spec_hits: number; spec_branch_hits: number; spec_hit_pct: number; lookahead_used: number;
  wasted_slm_steps: number; cancelled_calls: number; resyncs: number;
}
export interface Progress { what: 'SLM' | 'router'; url: string; done: number; total: number; }
export interface Message { role: 'system' | 'user' | 'assistant' | 'developer'; content: string; }
export interface GenerateOptions {
  threshold?: number; mode?: 'joint' | 'small_only' | 'large_only'; maxTokens?: number; pipeline?: boolean;
  temperature?: number; seed?: number; chat?: boolean; signal?: AbortSignal;
}
export class Tlr {
  constructor(options?: { workerUrl?: string | URL });
  stats: Stats | null;
  load(options: { slm: string | File | Blob; router: string | File | Blob; onProgress?: (p: Progress) => void;
                  simd?: boolean; threads?: number }):
    Promise<{ build: string; threads: number; cached: Record<string, boolean>; bytes: Record<string, number>; notice: string }>;
  connect(options: { server?: string; apiKey?: string; backend?: 'tlr' | 'openai'; timeoutS?: number; retries?: number;
                     model?: string }): Promise<{ reachable?: boolean }>;
  generate(input: string | { messages: Message[] }, options?: GenerateOptions): AsyncGenerator<Token, void, void>;
  terminate(): void;
}
