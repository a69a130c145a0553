"""fuzz_valid.py — the valid requests api_fuzz.py starts from: one builder per
POST surface (OpenAI chat / completions / responses, Anthropic messages,
Ollama chat / generate), each with random valid options (sampling,
penalties, stop, logprobs, tools, response formats)."""
from fuzz_values import valid_schema

PROMPTS = ["Write a Python function fibonacci(n).", "hi", "def add(a, b):", "Explain lists in one line.",
           "Return JSON with a key a.", "x", "What is 2+2?", "# sort a list\n"]


def tool_fn(name="get_weather", params=None, strict=None):
    fn = {"name": name, "description": "a tool",
          "parameters": params if params is not None else
          {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    if strict is not None:
        fn["strict"] = strict
    return fn


def maybe(rng, p):
    return rng.random() < p


def sampling_opts(rng, d, anthropic=False, ollama=False):
    if maybe(rng, 0.4):
        d["temperature"] = rng.choice([0, 0.7, 1] if anthropic else [0, 0.2, 0.7, 1, 1.5, 2])
    if maybe(rng, 0.2):
        d["top_p"] = rng.choice([0.1, 0.9, 1])
    if maybe(rng, 0.2):
        d["top_k"] = rng.choice([1, 5, 40] if anthropic else [0, 1, 5, 40, -1] if not ollama else [1, 5, 40])
    if anthropic:
        return
    if maybe(rng, 0.2):
        d["min_p"] = rng.choice([0, 0.05, 0.5])
    if maybe(rng, 0.3):
        d["seed"] = rng.choice([0, 1, 42, 2 ** 40, -5])
    if maybe(rng, 0.25):
        d["stop"] = rng.choice(["\n", ["\n\n", "def"], [], ["x"] * 8, "```"])
    if maybe(rng, 0.25):
        d["presence_penalty"] = rng.choice([-2, 0, 0.5, 2])
    if maybe(rng, 0.25):
        d["frequency_penalty"] = rng.choice([-2, 0, 0.5, 2])
    if ollama:
        if maybe(rng, 0.3):
            d["repeat_penalty"] = rng.choice([0.5, 1, 1.1, 2])
        if maybe(rng, 0.3):
            d["repeat_last_n"] = rng.choice([-1, 0, 1, 64, 100000])
    elif maybe(rng, 0.2):
        d["repetition_penalty"] = rng.choice([0.5, 1, 1.1, 2])


def base_chat(rng, model):
    msgs = []
    if maybe(rng, 0.3):
        msgs.append({"role": rng.choice(["system", "developer"]), "content": "You are terse."})
    if maybe(rng, 0.2):
        msgs += [{"role": "user", "content": "call it"},
                 {"role": "assistant", "content": None,
                  "tool_calls": [{"id": "call_1", "type": "function",
                                  "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    c = rng.choice(PROMPTS)
    msgs.append({"role": "user", "content": c if maybe(rng, 0.7) else [{"type": "text", "text": c}]})
    d = {"messages": msgs, rng.choice(["max_tokens", "max_completion_tokens"]): rng.randint(1, 16)}
    if maybe(rng, 0.8):
        d["model"] = model
    if maybe(rng, 0.4):
        d["stream"] = True
        if maybe(rng, 0.5):
            d["stream_options"] = {"include_usage": rng.choice([True, False])}
    sampling_opts(rng, d)
    if maybe(rng, 0.15):
        d["logprobs"] = True
        if maybe(rng, 0.7):
            d["top_logprobs"] = rng.choice([0, 1, 5, 20])
    if maybe(rng, 0.1):
        d["n"] = 1
    if maybe(rng, 0.1):
        d["logit_bias"] = {str(rng.randrange(8192)): rng.choice([-100, -1, 5, 100])}
    if maybe(rng, 0.15):
        d["response_format"] = rng.choice([{"type": "text"}, {"type": "json_object"},
                                           {"type": "json_schema",
                                            "json_schema": {"name": "s", "schema": valid_schema(rng), "strict": True}}])
    elif maybe(rng, 0.25):
        d["tools"] = [{"type": "function", "function": tool_fn(strict=rng.choice([None, True, False]))}]
        d["tool_choice"] = rng.choice(["auto", "none", "required", {"type": "function", "function": {"name": "get_weather"}}])
        if maybe(rng, 0.3):
            d["parallel_tool_calls"] = rng.choice([True, False])
    if maybe(rng, 0.05):
        d["prediction"] = {"type": "content", "content": "def fibonacci(n):"}
    if maybe(rng, 0.05):
        d["chat_template_kwargs"] = {"enable_thinking": False}
    if maybe(rng, 0.05):
        d[rng.choice(["user", "reasoning_effort", "service_tier"])] = "x"
    if maybe(rng, 0.05):
        d["metadata"] = {"k": "v"}
    return d


def base_completions(rng, model):
    p = rng.choice(PROMPTS)
    d = {"prompt": rng.choice([p, [p], [rng.randrange(8000) for _ in range(rng.randint(1, 8))]]),
         "max_tokens": rng.randint(1, 16)}
    if maybe(rng, 0.8):
        d["model"] = model
    if maybe(rng, 0.4):
        d["stream"] = True
    sampling_opts(rng, d)
    if maybe(rng, 0.2):
        d["logprobs"] = rng.choice([0, 1, 5, 20])
    if maybe(rng, 0.1):
        d["echo"] = False
    if maybe(rng, 0.1):
        d["logit_bias"] = {str(rng.randrange(8192)): rng.choice([-100, 3, 100])}
    if maybe(rng, 0.1):
        d["response_format"] = rng.choice([{"type": "json_object"},
                                           {"type": "json_schema", "json_schema": {"name": "s", "schema": valid_schema(rng)}}])
    return d


def base_responses(rng, model, state):
    if maybe(rng, 0.5):
        inp = rng.choice(PROMPTS)
    else:
        inp = [{"role": "user", "content": rng.choice(PROMPTS)}]
        if maybe(rng, 0.3):
            inp = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be terse."}]},
                   {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "call it"}]},
                   {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
                   {"type": "function_call_output", "call_id": "c1", "output": "rain"},
                   {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]}] + inp
    d = {"input": inp, "max_output_tokens": rng.randint(1, 16)}
    if maybe(rng, 0.8):
        d["model"] = model
    if maybe(rng, 0.3):
        d["instructions"] = "Answer briefly."
    if maybe(rng, 0.4):
        d["stream"] = True
    if maybe(rng, 0.3):
        d["store"] = rng.choice([True, False])
    sampling_opts(rng, d)
    d.pop("stop", None) if maybe(rng, 0.5) else None
    if maybe(rng, 0.15):
        d["text"] = {"format": rng.choice([{"type": "text"}, {"type": "json_object"},
                                           {"type": "json_schema", "name": "s", "schema": valid_schema(rng)}])}
    elif maybe(rng, 0.25):
        d["tools"] = [dict(type="function", **tool_fn(strict=rng.choice([None, True])))]
        d["tool_choice"] = rng.choice(["auto", "none", "required", {"type": "function", "name": "get_weather"}])
    if maybe(rng, 0.1):
        ids = state.resp_ids()
        d["previous_response_id"] = rng.choice(ids) if ids and maybe(rng, 0.7) else "resp_" + "%024x" % rng.getrandbits(96)
        if maybe(rng, 0.5):
            d["truncation"] = rng.choice(["auto", "disabled"])
    if maybe(rng, 0.05):
        d["metadata"] = {"a": "b"}
    if maybe(rng, 0.05):
        d["reasoning"] = {"effort": "low"}
    return d


def base_anthropic(rng, model):
    msgs = []
    if maybe(rng, 0.2):
        msgs += [{"role": "user", "content": "weather?"},
                 {"role": "assistant", "content": [{"type": "text", "text": "checking"},
                                                   {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                    "input": {"city": "Rome"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                               "content": rng.choice(["hot", [{"type": "text", "text": "hot"}]]),
                                               "is_error": False}]}]
    c = rng.choice(PROMPTS)
    msgs.append({"role": "user", "content": c if maybe(rng, 0.6) else [{"type": "text", "text": c}]})
    if maybe(rng, 0.1):
        msgs.append({"role": "assistant", "content": "def"})  # prefill
    d = {"model": model, "max_tokens": rng.randint(1, 16), "messages": msgs}
    if maybe(rng, 0.3):
        d["system"] = rng.choice(["Be terse.", [{"type": "text", "text": "Be terse."}]])
    if maybe(rng, 0.4):
        d["stream"] = True
    sampling_opts(rng, d, anthropic=True)
    if maybe(rng, 0.2):
        d["stop_sequences"] = rng.choice([["\n"], ["def", "return"], [], [""]])
    if maybe(rng, 0.15):
        d["output_config"] = {"format": {"type": "json_schema", "schema": valid_schema(rng)}}
    elif maybe(rng, 0.25):
        d["tools"] = [{"name": "get_weather", "description": "w",
                       "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
        d["tool_choice"] = rng.choice([{"type": "auto"}, {"type": "any"}, {"type": "none"},
                                       {"type": "tool", "name": "get_weather"}])
    if maybe(rng, 0.05):
        d["thinking"] = {"type": "disabled"}
    if maybe(rng, 0.05):
        d["metadata"] = {"user_id": "u"}
    return d


def ollama_options(rng):
    o = {"num_predict": rng.randint(1, 16)}
    sampling_opts(rng, o, ollama=True)
    return o


def base_ollama_chat(rng, model):
    msgs = []
    if maybe(rng, 0.3):
        msgs.append({"role": "system", "content": "Be terse."})
    if maybe(rng, 0.15):
        msgs += [{"role": "user", "content": "weather?"},
                 {"role": "assistant", "content": "",
                  "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
                 {"role": "tool", "content": "cold", "tool_name": "get_weather"}]
    msgs.append({"role": "user", "content": rng.choice(PROMPTS)})
    d = {"model": model, "messages": msgs, "options": ollama_options(rng), "stream": maybe(rng, 0.4)}
    if maybe(rng, 0.1):
        del d["stream"]  # Ollama streams by default
    if maybe(rng, 0.15):
        d["format"] = rng.choice(["json", valid_schema(rng, True)])
    elif maybe(rng, 0.2):
        d["tools"] = [{"type": "function", "function": tool_fn()}]
    if maybe(rng, 0.05):
        d["keep_alive"] = rng.choice(["5m", 0])
    if maybe(rng, 0.05):
        d["think"] = False
    return d


def base_ollama_generate(rng, model):
    d = {"model": model, "prompt": rng.choice(PROMPTS), "options": ollama_options(rng), "stream": maybe(rng, 0.4)}
    if maybe(rng, 0.1):
        del d["stream"]
    if maybe(rng, 0.2):
        d["system"] = "Be terse."
    if maybe(rng, 0.15):
        d["raw"] = True
    if maybe(rng, 0.15):
        d["context"] = [rng.randrange(8000) for _ in range(rng.randint(1, 10))]
    if maybe(rng, 0.15):
        d["format"] = rng.choice(["json", valid_schema(rng, True)])
    if maybe(rng, 0.05):
        d["suffix"] = ""
    if maybe(rng, 0.05):
        d["images"] = []
    return d
