-- +goose Up
-- The stock. reserved counts the copies promised to orders inventory accepted; the CHECKs
-- make "never promise a copy we do not have" a fact of the database, not of the code: a
-- bug that tried would fail its transaction instead of overselling.
CREATE TABLE books (
    id         uuid PRIMARY KEY,
    title      text        NOT NULL CHECK (title <> ''),
    on_hand    int         NOT NULL CHECK (on_hand >= 0),
    reserved   int         NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK (reserved <= on_hand)
);

-- One row per order line inventory reserved. The primary key is the natural guard of
-- this message type: an order's line can be reserved once, whatever message carries it.
-- The inbox deduplicates by message id; this table deduplicates by what the work means,
-- so even the same order sent under a second message id reserves nothing twice.
CREATE TABLE reservations (
    order_id   uuid        NOT NULL,
    book_id    uuid        NOT NULL REFERENCES books (id),
    quantity   int         NOT NULL CHECK (quantity > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, book_id)
);

CREATE INDEX reservations_book ON reservations (book_id);

-- +goose Down
DROP TABLE reservations;
DROP TABLE books;
