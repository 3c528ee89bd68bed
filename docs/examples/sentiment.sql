-- `make demo-real`: a real model (SmolLM2-135M-Instruct on llama.cpp) over docs/examples/reviews.csv
SELECT r.id,
       LLM('Is this movie review positive or negative? {review}', r.review,
           output => 'choice(positive,negative)') AS sentiment
FROM reviews r
