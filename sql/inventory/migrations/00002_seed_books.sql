-- +goose Up
-- The catalogue a fresh database starts with: fixed ids (Dune first) so that load
-- generators, docs and tests can name books without asking, some scarce enough that
-- orders get rejected under load, some plentiful. ON CONFLICT keeps a book an operator
-- already changed through PUT /books/{id} as it is.
INSERT INTO books (id, title, on_hand) VALUES
    ('018f2b1e-0000-7000-8000-000000000001', 'Dune', 10),
    ('018f2b1e-0000-7000-8000-000000000002', 'The Left Hand of Darkness', 5),
    ('018f2b1e-0000-7000-8000-000000000003', 'Neuromancer', 1000),
    ('018f2b1e-0000-7000-8000-000000000004', 'Foundation', 1000),
    ('018f2b1e-0000-7000-8000-000000000005', 'Hyperion', 3),
    ('018f2b1e-0000-7000-8000-000000000006', 'The Dispossessed', 4),
    ('018f2b1e-0000-7000-8000-000000000007', 'Snow Crash', 1000),
    ('018f2b1e-0000-7000-8000-000000000008', 'A Fire Upon the Deep', 1000),
    ('018f2b1e-0000-7000-8000-000000000009', 'Solaris', 5),
    ('018f2b1e-0000-7000-8000-000000000010', 'The Three-Body Problem', 1000)
ON CONFLICT (id) DO NOTHING;

-- +goose Down
DELETE FROM books WHERE id IN (
    '018f2b1e-0000-7000-8000-000000000001', '018f2b1e-0000-7000-8000-000000000002',
    '018f2b1e-0000-7000-8000-000000000003', '018f2b1e-0000-7000-8000-000000000004',
    '018f2b1e-0000-7000-8000-000000000005', '018f2b1e-0000-7000-8000-000000000006',
    '018f2b1e-0000-7000-8000-000000000007', '018f2b1e-0000-7000-8000-000000000008',
    '018f2b1e-0000-7000-8000-000000000009', '018f2b1e-0000-7000-8000-000000000010')
  AND NOT EXISTS (SELECT 1 FROM reservations r WHERE r.book_id = books.id);
