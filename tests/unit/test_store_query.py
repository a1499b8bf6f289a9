"""A Chroma server shared by two writers can answer a query with "Nothing found on disk" for a
collection the other writer has just written, before it has written that collection's vector
index (it failed tests/integration/test_memory.py's two writers once in a fresh clone). The store
asks again; any other error of the server is raised at once."""

import pytest
from chromadb.errors import InternalError

from accelopt.memory.store import query_collection

NOT_YET = "Error executing plan: Internal error: Error creating hnsw segment reader: Nothing found on disk"


class Collection:
    def __init__(self, failures: list[Exception]):
        self.failures, self.calls = failures, 0

    def query(self, **kwargs):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return {"asked": kwargs}


def test_an_index_not_yet_on_disk_is_asked_again_until_the_server_answers():
    collection = Collection([InternalError(NOT_YET), InternalError(NOT_YET)])
    assert query_collection(collection, n_results=3) == {"asked": {"n_results": 3}}
    assert collection.calls == 3


@pytest.mark.parametrize("error", [InternalError("Error loading hnsw index"), ValueError("n_results must be positive")])
def test_any_other_error_is_raised_at_once(error):
    collection = Collection([error])
    with pytest.raises(type(error)):
        query_collection(collection, n_results=3)
    assert collection.calls == 1
