-- name: ListBooks :many
-- One page of the catalogue in id order: the books after the cursor (all, without one),
-- at most max_rows of them. Keyset, not OFFSET: a deep page costs what the first does.
SELECT * FROM book_stock
WHERE sqlc.narg(after)::uuid IS NULL OR id > sqlc.narg(after)::uuid
ORDER BY id
LIMIT sqlc.arg(max_rows);

-- name: LockCatalogue :exec
-- Taken by every PUT /books/{id} before it looks at the catalogue's size, and held to its
-- commit: PUTs take turns, so two of them cannot both see room for one more book.
-- Reservations do not take it; they never add a book. ("books" in ASCII.)
SELECT pg_advisory_xact_lock(x'626f6f6b73'::bigint);

-- name: BooksIfNew :one
-- The size of the catalogue if the book is new, 0 if it exists already (replacing a book
-- never grows the catalogue). Read after LockCatalogue, so it counts every committed PUT.
SELECT CASE WHEN EXISTS (SELECT 1 FROM books b WHERE b.id = sqlc.arg(id)::uuid) THEN 0
            ELSE (SELECT count(*) FROM books c) END::bigint AS books;

-- name: GetBook :one
SELECT * FROM book_stock WHERE id = $1;

-- name: UpsertBook :one
-- PUT /books/{id}, the catalogue's half: the title, absolute, so applying it twice is
-- applying it once. created is true when the row was inserted: only a new row has xmax 0.
-- An existing book's row stays locked to the commit, as LockBooks locks it, so the stock
-- SetOnHand reads next is the stock no reservation can change before it commits.
INSERT INTO books (id, title)
VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE
SET title = EXCLUDED.title, updated_at = now()
RETURNING id, title, (xmax = 0)::bool AS created;

-- name: SetOnHand :one
-- PUT /books/{id}, the stock's half: the book's next level, with the new on_hand and the
-- copies reserved so far (none for a new book). No row comes back, and nothing changes,
-- when more copies are reserved than the new on_hand: those orders were promised their
-- books. The newest level is read by its key backwards (see stock_levels).
WITH newest AS (
    SELECT version, reserved FROM stock_levels
    WHERE book_id = sqlc.arg(id)
    ORDER BY version DESC
    LIMIT 1
)
INSERT INTO stock_levels (book_id, version, on_hand, reserved)
SELECT sqlc.arg(id), coalesce(max(version), 0) + 1, sqlc.arg(on_hand)::int, coalesce(max(reserved), 0)
FROM newest
HAVING coalesce(max(reserved), 0) <= sqlc.arg(on_hand)::int
RETURNING on_hand, reserved;

-- name: LockBooks :many
-- The row locks of one order, taken in one fixed order (book id ascending). Two orders
-- that share books lock them in the same order, so one waits for the other instead of
-- each holding a book the other needs: no deadlock, whatever the order of their lines.
-- The lock is on the catalogue's row, which a reservation never changes: only the stock
-- levels grow versions. Read the stock with StockOf after it, not in the same statement:
-- a statement that waited for a lock still sees what its snapshot saw before the wait.
SELECT id
FROM books
WHERE id = ANY(sqlc.arg(ids)::uuid[])
ORDER BY id
FOR UPDATE;

-- name: StockOf :many
-- The newest level of each book, read after LockBooks: what is on hand and reserved.
SELECT l.book_id::uuid AS id, s.on_hand, s.reserved
FROM unnest(sqlc.arg(ids)::uuid[]) AS l(book_id)
CROSS JOIN LATERAL (
    SELECT on_hand, reserved FROM stock_levels
    WHERE book_id = l.book_id
    ORDER BY version DESC
    LIMIT 1
) s;

-- name: AddReserved :execrows
-- Each book's next level, its reserved count moved by the book's quantity (negative to
-- give copies back). Called with the books locked by LockBooks and the lines checked
-- against StockOf; the CHECKs of stock_levels refuse a count below zero or above on_hand
-- whatever the caller checked.
WITH change AS (
    SELECT unnest(sqlc.arg(ids)::uuid[]) AS book_id, unnest(sqlc.arg(quantities)::int[]) AS quantity
)
INSERT INTO stock_levels (book_id, version, on_hand, reserved)
SELECT c.book_id, s.version + 1, s.on_hand, s.reserved + c.quantity
FROM change c
CROSS JOIN LATERAL (
    SELECT version, on_hand, reserved FROM stock_levels
    WHERE book_id = c.book_id
    ORDER BY version DESC
    LIMIT 1
) s;

-- name: DeleteReplacedLevels :execrows
-- At most batch_size of the levels changed more than retention_seconds ago that a newer
-- level of the same book replaced: the stock's history is kept for a while, the stock
-- itself for good.
DELETE FROM stock_levels
WHERE (book_id, version) IN (
    SELECT o.book_id, o.version FROM stock_levels o
    WHERE o.changed_at < now() - make_interval(secs => sqlc.arg(retention_seconds)::float8)
      AND EXISTS (SELECT 1 FROM stock_levels n WHERE n.book_id = o.book_id AND n.version > o.version)
    LIMIT sqlc.arg(batch_size));

-- name: InsertReservations :execrows
-- All lines of an order or, when the order was reserved before, none: DO NOTHING turns a
-- second reservation of the same order into 0 rows for the caller to see.
INSERT INTO reservations (order_id, book_id, quantity)
SELECT sqlc.arg(order_id), unnest(sqlc.arg(ids)::uuid[]), unnest(sqlc.arg(quantities)::int[])
ON CONFLICT (order_id, book_id) DO NOTHING;

-- name: ListReservations :many
SELECT * FROM reservations WHERE order_id = $1 ORDER BY book_id;

-- name: RecordAnswer :execrows
-- 0 rows: this order was answered before, under another message id.
INSERT INTO order_answers (order_id, outcome)
VALUES ($1, $2)
ON CONFLICT (order_id) DO NOTHING;

-- name: RecordAnswers :execrows
-- RecordAnswer for the orders of a batch. Fewer rows than orders: one was answered before.
INSERT INTO order_answers (order_id, outcome)
SELECT unnest(sqlc.arg(order_ids)::uuid[]), unnest(sqlc.arg(outcomes)::text[])
ON CONFLICT (order_id) DO NOTHING;

-- name: InsertReservationsOfOrders :execrows
-- InsertReservations for the lines of several orders, one row per line.
INSERT INTO reservations (order_id, book_id, quantity)
SELECT unnest(sqlc.arg(order_ids)::uuid[]), unnest(sqlc.arg(book_ids)::uuid[]), unnest(sqlc.arg(quantities)::int[])
ON CONFLICT (order_id, book_id) DO NOTHING;
