"""BM25 on FTS5: code-aware terms, and queries that can never be read as FTS5 syntax."""

from __future__ import annotations

from etude.search.lexical import LexicalIndex, code_terms, query_expression


def test_identifiers_split_into_words():
    assert code_terms("parseCronField HTTPServer") == "parse Cron Field HTTP Server"
    index = LexicalIndex(["def parse_cron_field(): ...", "class HTTPServer: ...", "x = 1"])
    assert [row for row, _ in index.search("cron field parsing", 5)] == [0]
    assert [row for row, _ in index.search("http server", 5)] == [1]


def test_rarer_and_more_terms_rank_first():
    index = LexicalIndex(["cache cache cache", "cache evict lru", "evict"])
    assert index.search("lru cache evict", 3)[0][0] == 1


def test_queries_are_terms_never_syntax():
    assert query_expression('NEAR(a b) AND "quoted" OR -x*') == '"near" OR "b" OR "quoted" OR "x"'

    assert query_expression("?? !! ...") is None
    index = LexicalIndex(["a NEAR b", "and or not"])
    assert index.search("?? !!", 5) == []
    # Only stopwords: they are all the query has, so they are kept.
    assert [row for row, _ in index.search("AND OR NOT", 5)] == [1]


def test_stopwords_do_not_decide_the_ranking():
    index = LexicalIndex(["the cache of the index is in the file", "def evict_entry(): ..."])
    assert index.search("where is the entry evicted", 2)[0][0] == 1
    assert [row for row, _ in index.search("where is the", 2)] == [0]
