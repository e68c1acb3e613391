"""Write the shipped test assets: a synthetic English-like corpus and a tokenizer trained on it.

titan ships no third-party text, so ``c4_test`` is generated here from a small seeded grammar of
our own. Documents keep one topic and a few recurring characters, and sentences follow a handful
of templates (including sums that are always right), so a small language model's loss falls
clearly within a few hundred steps. Everything is pure Python with a fixed seed; running the
script twice writes byte-identical files, which ``tests/test_data.py`` checks against the
committed copies.

    python tests/assets/make_assets.py            # rewrite tests/assets/{c4_test,tokenizer}
    python tests/assets/make_assets.py --out DIR  # write the same files under DIR
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SEED = 20240611
TRAIN_DOCUMENTS = 2000
VALIDATION_DOCUMENTS = 200
MIN_WORDS, MAX_WORDS = 50, 600
VOCAB_SIZE = 2000
BOS_TOKEN, EOS_TOKEN, PAD_TOKEN = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"
SPECIAL_TOKENS = [BOS_TOKEN, EOS_TOKEN, PAD_TOKEN]

# A few non-ASCII names keep multi-byte UTF-8 in the corpus, so the tokenizer learns some.
NAMES = [
    "Ada", "Bruno", "Chloe", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas",
    "Kira", "Liam", "Mona", "Nils", "Olga", "Pablo", "Rosa", "Sami", "Tara", "Victor",
    "Zoë", "José", "Björn", "Ngozi", "Mei", "Anaïs",
]  # fmt: skip
SHE_NAMES = frozenset({"Ada", "Chloe", "Elena", "Greta", "Ines", "Kira", "Mona", "Olga", "Rosa",
                       "Tara", "Zoë", "Ngozi", "Mei", "Anaïs"})  # fmt: skip
TIMES = ["morning", "afternoon", "evening", "night", "spring", "summer", "autumn", "winter"]
ADVERBS = ["slowly", "quickly", "carefully", "quietly", "happily", "gently", "twice", "again"]
CONNECTIVES = ["Then", "Later", "After that", "Soon", "Meanwhile", "At last", "Next"]
NUMBERS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
]  # fmt: skip
IRREGULAR_PLURALS = {"knife": "knives", "loaf": "loaves", "leaf": "leaves", "child": "children",
                     "fish": "fish", "sheep": "sheep", "mouse": "mice"}  # fmt: skip

# One topic per document: who acts there, what they handle, where, and how things look.
TOPICS = {
    "garden": {
        "title": "The Garden",
        "agents": ["gardener", "neighbour", "child", "farmer"],
        "things": ["rose", "tomato", "leaf", "seed", "spade", "bucket", "bean", "apple"],
        "places": ["by the fence", "under the old tree", "near the pond", "in the greenhouse"],
        "verbs": [("plant", "planted"), ("water", "watered"), ("pick", "picked"),
                  ("carry", "carried"), ("wash", "washed")],
        "adjectives": ["green", "ripe", "small", "wet", "tall", "yellow"],
    },
    "harbor": {
        "title": "At the Harbor",
        "agents": ["sailor", "fisher", "captain", "merchant"],
        "things": ["boat", "rope", "net", "fish", "barrel", "sail", "anchor", "lamp"],
        "places": ["on the pier", "at the dock", "beside the lighthouse", "in the bay"],
        "verbs": [("tie", "tied"), ("pull", "pulled"), ("mend", "mended"), ("load", "loaded"),
                  ("paint", "painted")],
        "adjectives": ["heavy", "blue", "old", "salty", "long", "strong"],
    },
    "kitchen": {
        "title": "In the Kitchen",
        "agents": ["cook", "baker", "grandmother", "guest"],
        "things": ["loaf", "pot", "knife", "cup", "onion", "cake", "spoon", "plate"],
        "places": ["on the table", "near the oven", "in the sink", "on the shelf"],
        "verbs": [("bake", "baked"), ("cut", "cut"), ("stir", "stirred"), ("serve", "served"),
                  ("clean", "cleaned")],
        "adjectives": ["warm", "sweet", "clean", "round", "sharp", "fresh"],
    },
    "workshop": {
        "title": "The Workshop",
        "agents": ["carpenter", "smith", "apprentice", "engineer"],
        "things": ["hammer", "nail", "board", "wheel", "chair", "box", "saw", "clock"],
        "places": ["on the bench", "by the window", "in the corner", "under the lamp"],
        "verbs": [("build", "built"), ("fix", "fixed"), ("sand", "sanded"), ("measure", "measured"),
                  ("polish", "polished")],
        "adjectives": ["wooden", "broken", "smooth", "new", "heavy", "tiny"],
    },
    "forest": {
        "title": "Into the Forest",
        "agents": ["ranger", "hunter", "traveler", "scout"],
        "things": ["mushroom", "branch", "stone", "feather", "map", "berry", "mouse", "sheep"],
        "places": ["along the path", "beside the river", "on the hill", "in the valley"],
        "verbs": [("find", "found"), ("follow", "followed"), ("gather", "gathered"),
                  ("count", "counted"), ("watch", "watched")],
        "adjectives": ["dark", "quiet", "wild", "red", "cold", "bright"],
    },
    "market": {
        "title": "Market Day",
        "agents": ["seller", "buyer", "baker", "child"],
        "things": ["basket", "coin", "cheese", "scarf", "pear", "jar", "bell", "ribbon"],
        "places": ["at the stall", "in the square", "by the fountain", "near the gate"],
        "verbs": [("sell", "sold"), ("buy", "bought"), ("wrap", "wrapped"), ("weigh", "weighed"),
                  ("show", "showed")],
        "adjectives": ["cheap", "pretty", "soft", "golden", "large", "striped"],
    },
    "observatory": {
        "title": "The Observatory",
        "agents": ["astronomer", "student", "teacher", "visitor"],
        "things": ["star", "lens", "chart", "planet", "notebook", "mirror", "comet", "moon"],
        "places": ["on the roof", "under the dome", "by the telescope", "in the library"],
        "verbs": [("observe", "observed"), ("draw", "drew"), ("record", "recorded"),
                  ("name", "named"), ("study", "studied")],
        "adjectives": ["distant", "faint", "silver", "huge", "cold", "bright"],
    },
}  # fmt: skip


def plural(noun: str) -> str:
    """English plural of the corpus nouns (the irregular ones are listed)."""
    if noun in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "x", "sh", "ch")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


class DocumentWriter:
    """Writes one document: a topic, a cast of two or three characters, and templated sentences."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.topic = TOPICS[rng.choice(list(TOPICS))]
        self.cast = rng.sample(NAMES, 3)

    def pick(self, key: str) -> str:
        return self.rng.choice(self.topic[key])

    def name(self) -> str:
        return self.rng.choice(self.cast)

    def verb(self) -> tuple[str, str]:
        return self.rng.choice(self.topic["verbs"])

    def pronoun(self, name: str) -> str:
        return "she" if name in SHE_NAMES else "he"

    def sentence(self) -> str:
        templates = [
            self.action,
            self.scene,
            self.because,
            self.dialogue,
            self.counting,
            self.when,
            self.description,
        ]
        return self.rng.choice(templates)()

    def action(self) -> str:
        name, (_, past) = self.name(), self.verb()
        adjective, thing = self.pick("adjectives"), self.pick("things")
        return f"{name} {past} the {adjective} {thing} {self.pick('places')}."

    def scene(self) -> str:
        count = self.rng.randint(2, 12)
        return (
            f"In the {self.rng.choice(TIMES)}, the {self.pick('agents')} "
            f"{self.verb()[1]} {NUMBERS[count]} {plural(self.pick('things'))}."
        )

    def because(self) -> str:
        name, thing = self.name(), self.pick("things")
        return (
            f"The {thing} was {self.pick('adjectives')}, so {name} {self.verb()[1]} it "
            f"{self.rng.choice(ADVERBS)}."
        )

    def dialogue(self) -> str:
        asker, answerer = self.rng.sample(self.cast, 2)
        thing = self.pick("things")
        return (
            f'"Where is the {thing}?" asked {asker}. '
            f'"It is {self.pick("places")}," said {answerer}.'
        )

    def counting(self) -> str:
        # The sum is always right: a pattern a model can pick up only by reading the numbers.
        first, second = self.rng.randint(1, 10), self.rng.randint(1, 10)
        thing, other = self.rng.sample(self.topic["things"], 2)
        return (
            f"{self.name()} counted {NUMBERS[first]} {plural(thing) if first > 1 else thing} "
            f"and {NUMBERS[second]} {plural(other) if second > 1 else other}, "
            f"which makes {NUMBERS[first + second]} in all."
        )

    def when(self) -> str:
        name, thing, other = self.name(), self.pick("things"), self.pick("things")
        return (
            f"When {name} {self.verb()[1]} the {thing}, {self.pronoun(name)} "
            f"{self.verb()[1]} {article(other)} {other} {self.pick('places')}."
        )

    def description(self) -> str:
        adjective, thing = self.pick("adjectives"), self.pick("things")
        connective = self.rng.choice(CONNECTIVES)
        return (
            f"{connective} the {self.pick('agents')} saw {article(adjective)} {adjective} "
            f"{thing} {self.pick('places')}."
        )

    def document(self, words: int) -> str:
        paragraphs: list[str] = []
        written = 0
        while written < words:
            sentences = [self.sentence() for _ in range(self.rng.randint(3, 6))]
            written += sum(len(sentence.split()) for sentence in sentences)
            paragraphs.append(" ".join(sentences))
        return self.topic["title"] + "\n\n" + "\n\n".join(paragraphs)


def document_words(rng: random.Random) -> int:
    # Skewed toward short documents (mean ~130 words) so the corpus stays under 2 MB while a
    # few documents are long enough to span several training sequences.
    return MIN_WORDS + int((MAX_WORDS - MIN_WORDS) * rng.random() ** 6)


def corpus(rng: random.Random, count: int) -> list[str]:
    return [DocumentWriter(rng).document(document_words(rng)) for _ in range(count)]


def write_jsonl(path: Path, documents: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in documents]
    path.write_text("".join(lines), encoding="utf-8", newline="\n")


def train_tokenizer(documents: list[str], folder: Path) -> None:
    """A byte-level BPE tokenizer with Llama 3's special-token names, in Hugging Face's layout."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    # No prefix space and no normaliser: decode(encode(text)) must give back the exact text.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"), pretty=True)
    added = {
        str(tokenizer.token_to_id(token)): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for token in SPECIAL_TOKENS
    }
    config = {
        "added_tokens_decoder": added,
        "bos_token": BOS_TOKEN,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "model_max_length": 131072,
        "pad_token": PAD_TOKEN,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    (folder / "tokenizer_config.json").write_text(text, encoding="utf-8", newline="\n")


def write_assets(out: Path) -> None:
    """Write ``c4_test/{data,validation}.jsonl`` and ``tokenizer/`` under ``out``."""
    rng = random.Random(SEED)
    train = corpus(rng, TRAIN_DOCUMENTS)
    validation = corpus(rng, VALIDATION_DOCUMENTS)
    write_jsonl(out / "c4_test" / "data.jsonl", train)
    write_jsonl(out / "c4_test" / "validation.jsonl", validation)
    train_tokenizer(train, out / "tokenizer")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    write_assets(parser.parse_args(argv).out)


if __name__ == "__main__":
    main()
