// A standalone copy of benches/vectors.rs's vector generator, printing checksums that
// benches/peers/vectors.py compares with its numpy re-implementation (its CHECK constant).
// Not a cargo target (benches/peers/ holds no main.rs): build it by hand, outside the repo's
// build dir:
//
//     rustc -O benches/peers/gen_check.rs -o /tmp/gen_check && /tmp/gen_check
//
// Keep random_unit identical to the one in benches/vectors.rs.
const N: usize = 100_000;
const DIM: usize = 384;
fn random_unit(x: &mut u64) -> Vec<f32> {
    let v: Vec<f32> = (0..DIM)
        .map(|_| {
            *x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect();
    let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.into_iter().map(|a| a / n).collect()
}

/// Adds sum over i of bits(v_i) * (i + 1), mod 2^64, over the values in order.
fn feed(h: &mut u64, i: &mut u64, v: &[f32]) {
    for a in v {
        *i += 1;
        *h = h.wrapping_add((a.to_bits() as u64).wrapping_mul(*i));
    }
}

fn main() {
    // Same draw order as benches/vectors.rs: the rows, criterion's query, the 200 queries.
    let mut x = 42u64;
    let (mut rows, mut i) = (0u64, 0u64);
    let mut first = Vec::new();
    for r in 0..N {
        let v = random_unit(&mut x);
        if r == 0 {
            first = v.clone();
        }
        feed(&mut rows, &mut i, &v);
    }
    let (mut queries, mut j) = (0u64, 0u64);
    for _ in 0..201 {
        feed(&mut queries, &mut j, &random_unit(&mut x));
    }
    println!("rows_wsum={rows:016x} queries_wsum={queries:016x} first={:?}", &first[..3]);
}
