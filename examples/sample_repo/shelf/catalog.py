from dataclasses import dataclass, field


@dataclass
class Book:
    isbn: str
    title: str
    copies: int = 1


@dataclass
class Catalog:
    books: dict = field(default_factory=dict)

    def add(self, book):
        if book.isbn in self.books:
            self.books[book.isbn].copies += book.copies
        else:
            self.books[book.isbn] = book

    def search(self, text):
        """Books whose title contains `text`, ignoring case."""
        return [b for b in self.books.values() if text.lower() in b.title]
