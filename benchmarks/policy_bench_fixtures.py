"""Small prompt sets in the official formats of `align eval policy --bench`, for runs by hand.

    python -m benchmarks.policy_bench_fixtures DIR

writes DIR/ifeval_input_data.jsonl (IFEval's input_data.jsonl format: one prompt per instruction id, 25 prompts,
kwargs filled with null for the arguments an instruction does not take, as the hub copy has them) and
DIR/mt_bench_question.jsonl (FastChat's MT-Bench question format, two turns). For AlpacaEval-format reference
answers, write a model's own with `align eval policy --bench alpacaeval --data suite --write-reference FILE`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# (instruction id, kwargs, prompt): prompts written so that the instruction is stated in words, as in IFEval
IFEVAL: list[tuple[str, dict[str, Any], str]] = [
    (
        "keywords:existence",
        {"keywords": ["river", "bridge"]},
        "Write a short story that mentions a river and a bridge.",
    ),
    (
        "keywords:frequency",
        {"keyword": "green", "frequency": 3, "relation": "at least"},
        "Describe a forest. Use the word 'green' at least 3 times.",
    ),
    ("keywords:forbidden_words", {"forbidden_words": ["good", "bad"]}, "Review a movie without the words good or bad."),
    (
        "keywords:letter_frequency",
        {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
        "Write a sentence about a zoo in which the letter z appears at least 2 times.",
    ),
    (
        "language:response_language",
        {"language": "fr"},
        "Tell me about Paris. Your ENTIRE response should be in French language, no other language is allowed.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "Explain rain in fewer than 3 sentences.",
    ),
    (
        "length_constraints:number_paragraphs",
        {"num_paragraphs": 2},
        "Write about cats in 2 paragraphs. Separate paragraphs with the markdown divider: ***",
    ),
    (
        "length_constraints:number_words",
        {"num_words": 40, "relation": "less than"},
        "Summarize the water cycle in less than 40 words.",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "however"},
        "Write 2 paragraphs about coffee, separated by two new lines. The 2nd paragraph must start with the word "
        "'however'.",
    ),
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        "Write a letter template with at least 2 placeholders in square brackets, such as [name].",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.S."},
        "Write a note to a friend. At the end, add a postscript starting with P.S.",
    ),
    (
        "detectable_format:number_bullet_lists",
        {"num_bullets": 3},
        "List exactly 3 fruits as markdown bullet points such as:\n* This is a point.",
    ),
    (
        "detectable_format:constrained_response",
        {},
        "Is the sky blue? Answer with one of the following options: ('My answer is yes.', 'My answer is no.', "
        "'My answer is maybe.')",
    ),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "Describe a city. Highlight at least 2 sections with markdown, i.e. *highlighted section*.",
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": 2},
        "Write a plan with 2 sections. Mark the beginning of each section with Section X, such as: Section 1",
    ),
    (
        "detectable_format:json_format",
        {},
        "Give a person's name and age. Entire output should be wrapped in JSON format.",
    ),
    (
        "detectable_format:title",
        {},
        "Write a poem. Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>.",
    ),
    (
        "combination:two_responses",
        {},
        "Give two different slogans for a bakery. Responses and only responses should be separated by 6 asterisk "
        "symbols: ******.",
    ),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": "What is the capital of Italy?"},
        "First repeat the request word for word without change, then give your answer: What is the capital of Italy?",
    ),
    (
        "startend:end_checker",
        {"end_phrase": "Is there anything else I can help with?"},
        "Explain what a noun is. Finish your response with this exact phrase Is there anything else I can help with?",
    ),
    ("startend:quotation", {}, "Say something about the moon. Wrap your entire response with double quotation marks."),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "Give a safety tip. Use words with all capital letters at least 2 times.",
    ),
    (
        "change_case:english_capital",
        {},
        "Describe the sun. Your entire response should be in English, and in all capital letters.",
    ),
    (
        "change_case:english_lowercase",
        {},
        "Describe snow. Your entire response should be in English, and in all lowercase letters.",
    ),
    ("punctuation:no_comma", {}, "Describe your ideal weekend. In your entire response, refrain from any commas."),
]
ARGUMENTS = sorted({k for _, kw, _ in IFEVAL for k in kw})

MT_BENCH = [
    {"question_id": 81, "category": "writing", "turns": ["Write a haiku about autumn.", "Rewrite it so it rhymes."]},
    {
        "question_id": 101,
        "category": "reasoning",
        "turns": ["I pass the second runner. What place am I in?", "And if I pass the last runner?"],
    },
    {"question_id": 111, "category": "math", "turns": ["What is 17 times 3?", "Divide that by 3."]},
    {
        "question_id": 131,
        "category": "extraction",
        "turns": ["Extract the year: 'Founded in 1998 in Oslo.'", "And the city?"],
    },
]


def write(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    ifeval = out / "ifeval_input_data.jsonl"
    with ifeval.open("w", encoding="utf-8") as f:
        for key, (iid, kwargs, prompt) in enumerate(IFEVAL, start=1000):
            full = {a: kwargs.get(a) for a in ARGUMENTS}  # the hub copy's null-filled kwargs
            row = {"key": key, "prompt": prompt, "instruction_id_list": [iid], "kwargs": [full]}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    mt = out / "mt_bench_question.jsonl"
    mt.write_text("".join(json.dumps(r) + "\n" for r in MT_BENCH), encoding="utf-8")
    return [ifeval, mt]


if __name__ == "__main__":
    for path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/policy_bench_fixtures")):
        print(f"wrote {path}")
