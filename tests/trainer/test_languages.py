"""One featuriser for every language: tokenisation of mixed scripts, and a small training per
script family (kana and kanji, Chinese, hangul, Arabic, German) through the real trainer that
must classify paraphrases it never saw."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from trainer.data import LabelledData
from trainer.engine import train
from trainer.hparams import DEFAULT_HPARAMS
from trainer.inference import LoadedModel
from trainer.ngrams import tokenize

# Per family: training texts by intent, then held-out paraphrases by intent.
SAMPLES: dict[str, tuple[dict[str, list[str]], dict[str, list[str]]]] = {
    "japanese": (
        {
            "weather": [
                "明日の天気を教えて",
                "今日は雨が降りますか",
                "週末の天気予報はどう",
                "東京は晴れるかな",
                "傘は必要ですか",
                "明日の気温は何度",
            ],
            "music": [
                "音楽をかけて",
                "ジャズを再生して",
                "好きな曲を流して",
                "この歌手の新しいアルバムを聴きたい",
                "音量を上げて",
                "プレイリストをシャッフルして",
            ],
            "restaurant": [
                "今夜レストランを予約して",
                "二人で夕食の席を取りたい",
                "寿司屋を予約できますか",
                "明日のランチを三名で予約",
                "近くのイタリアンを予約して",
                "金曜日の夜にテーブルを予約して",
            ],
        },
        {
            "weather": ["今週の天気はどうですか", "大阪は雨が降る？"],
            "music": ["ロックの曲を再生して", "音楽を流してください"],
            "restaurant": ["土曜日の夕食を予約したい", "四人でレストランの席を予約して"],
        },
    ),
    "chinese": (
        {
            "weather": [
                "明天天气怎么样",
                "今天会下雨吗",
                "北京周末的天气预报",
                "明天气温多少度",
                "出门需要带伞吗",
                "上海今天是晴天吗",
            ],
            "music": [
                "播放一首歌",
                "我想听周杰伦的歌",
                "放点爵士音乐",
                "把音量调大",
                "播放我的歌单",
                "下一首歌",
            ],
            "restaurant": [
                "帮我预订今晚的餐厅",
                "订一张两个人的桌子",
                "我想预约明天的午餐",
                "附近有什么好餐厅可以订位",
                "预订周五晚上的晚餐",
                "给我订一家火锅店",
            ],
        },
        {
            "weather": ["后天天气好吗", "广州明天下雨吗"],
            "music": ["播放轻音乐", "我想听一首新歌"],
            "restaurant": ["帮我订三个人的晚餐", "预订一家餐厅的位子"],
        },
    ),
    "korean": (
        {
            "weather": [
                "내일 날씨 알려줘",
                "오늘 비가 와요?",
                "주말 일기예보 어때",
                "서울 날씨가 맑아요?",
                "우산 필요해?",
                "내일 기온이 몇 도야",
            ],
            "music": [
                "음악 틀어줘",
                "재즈 음악 재생해 줘",
                "좋아하는 노래 틀어 줘",
                "볼륨 좀 올려줘",
                "새 앨범 듣고 싶어",
                "플레이리스트 재생해",
            ],
            "restaurant": [
                "오늘 저녁 식당 예약해 줘",
                "두 명 자리 예약하고 싶어요",
                "내일 점심 예약 가능해요?",
                "근처 레스토랑 예약해줘",
                "금요일 저녁 식사 예약",
                "초밥집 예약할 수 있어?",
            ],
        },
        {
            # spaced differently from the training texts: 날씨가 / 날씨, 재생해줘 / 재생해 줘
            "weather": ["부산날씨어때?", "오늘 비 와?"],
            "music": ["신나는 노래 재생해줘", "음악좀 틀어"],
            "restaurant": ["토요일 저녁 예약해 줘", "세 명 식당 자리 예약"],
        },
    ),
    "arabic": (
        {
            "weather": [
                "كيف الطقس غدا",
                "هل ستمطر اليوم",
                "ما هي درجة الحرارة في الرياض",
                "توقعات الطقس لنهاية الأسبوع",
                "هل أحتاج مظلة اليوم",
                "هل الجو مشمس في دبي",
            ],
            "music": [
                "شغل موسيقى",
                "أريد أن أسمع أغنية جديدة",
                "شغل أغاني فيروز",
                "ارفع صوت الموسيقى",
                "شغل قائمة التشغيل",
                "الأغنية التالية من فضلك",
            ],
            "restaurant": [
                "احجز طاولة في مطعم الليلة",
                "أريد حجز عشاء لشخصين",
                "احجز لي مطعما قريبا",
                "هل يمكنني حجز طاولة غدا",
                "حجز غداء يوم الجمعة",
                "احجز مطعم سمك لأربعة أشخاص",
            ],
        },
        {
            # with the optional vowel marks that the training texts leave out
            "weather": ["كَيْفَ الطَّقْسُ اليَوْمَ", "هل ستمطر غدا في جدة"],
            "music": ["شغّل موسيقى هادئة", "أريد أن أسمع أغاني جديدة"],
            "restaurant": ["احجز طاولة لثلاثة أشخاص", "أريد حجز مطعم للعشاء"],
        },
    ),
    "german": (
        {
            "weather": [
                "Wie wird das Wetter morgen?",
                "Regnet es heute in München?",
                "Wettervorhersage für das Wochenende",
                "Brauche ich heute einen Regenschirm?",
                "Wie viel Grad hat es draußen?",
                "Scheint morgen die Sonne in Köln?",
            ],
            "music": [
                "Spiel etwas Musik",
                "Ich möchte ein Lied von Grönemeyer hören",
                "Spiel meine Playlist ab",
                "Mach die Musik lauter",
                "Spiel das nächste Lied",
                "Spiele Jazz im Wohnzimmer",
            ],
            "restaurant": [
                "Reservier einen Tisch für heute Abend",
                "Ich möchte einen Tisch für zwei Personen buchen",
                "Buche ein Restaurant in der Nähe",
                "Reservierung für Freitagabend im Gasthaus",
                "Kann ich morgen Mittag einen Tisch reservieren?",
                "Tisch für vier Personen im Biergarten, bitte",
            ],
        },
        {
            "weather": ["Wie ist das Wetter in Düsseldorf?", "Regnet es morgen draußen?"],
            "music": ["Spiel ein Lied von den Ärzten", "MUSIK LAUTER, BITTE"],
            "restaurant": [
                "Reserviere einen Tisch für Samstagabend",
                "Ich möchte für drei Personen reservieren",
            ],
        },
    ),
}

# The installation's hyper-parameters (so the featuriser is the production one) without the
# five cross-fitting models, which only measure held-out scores.
_HPARAMS = dataclasses.replace(DEFAULT_HPARAMS, cross_fit_folds=0)


def _labelled(by_intent: dict[str, list[str]]) -> LabelledData:
    pairs = [(text, intent) for intent, texts in by_intent.items() for text in texts]
    return LabelledData([text for text, _ in pairs], [intent for _, intent in pairs])


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(SAMPLES))
def test_a_small_training_classifies_unseen_paraphrases_in_each_script(family: str, tmp_path: Path) -> None:
    training, held_out = SAMPLES[family]
    train(_labelled(training), workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=_HPARAMS)

    test = _labelled(held_out)
    predicted = [scores[0][0] for scores in LoadedModel.load(tmp_path / "m").classify(test.texts)]
    assert list(zip(test.texts, predicted, strict=True)) == list(zip(test.texts, test.labels, strict=True))


@pytest.mark.parametrize(
    ("text", "words", "tokens"),
    [
        (
            "iPhoneの電池が切れた",
            ["iphone", "の", "電", "池", "が", "切", "れ", "た"],
            ["iphone", "の電池が切れた"],
        ),
        ("我想订2张去北京的机票", [*"我想订", "2", *"张去北京的机票"], ["我想订", "2", "张去北京的机票"]),
        ("人々は二〇二四年に", [*"人々は二〇二四年に"], ["人々は二〇二四年に"]),
        ("ｶﾞｲﾄﾞ・ブック", [*"ガイドブック"], ["ガイド", "ブック"]),  # half-width kana, folded by NFKC
        ("葛\U000e0100飾区の𠮟る", [*"葛飾区の𠮟る"], ["葛飾区の𠮟る"]),  # variation selector; plane 2
        ("내일 날씨 OK?", ["내", "일", "날", "씨", "ok"], ["내일", "날씨", "ok"]),
        ("Straße, Öffnungszeiten", ["straße", "öffnungszeiten"], ["straße", "öffnungszeiten"]),
        ("مرحبا بكم في café", ["مرحبا", "بكم", "في", "café"], ["مرحبا", "بكم", "في", "café"]),
    ],
)
def test_unsegmented_scripts_give_one_word_per_character_and_one_token_per_run(
    text: str, words: list[str], tokens: list[str]
) -> None:
    assert tokenize(text) == (words, tokens)


def test_korean_spacing_and_arabic_vowel_marks_do_not_change_the_words() -> None:
    assert tokenize("내일날씨 알려줘")[0] == tokenize("내일 날씨 알려 줘")[0]
    vocalised, bare = tokenize("كَيْفَ الطَّقْسُ جدًّا"), tokenize("كيف الطقس جدا")
    assert vocalised == bare == (["كيف", "الطقس", "جدا"], ["كيف", "الطقس", "جدا"])
    assert tokenize("مـــرحبا") == (["مرحبا"], ["مرحبا"])  # tatweel
