//! The portable kernels: what every CPU runs, and the reference the SIMD kernels of the
//! other files in this module are tested against.
//!
//! Both keep several independent accumulators, which the compiler vectorises for the
//! baseline target. The f32 one fixes the order of its sums, so a row scores the same bit for
//! bit in every search path (an exact search and a first pass's rescoring agree).

/// Dot product with eight independent accumulators.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for (x, y) in ra.iter().zip(rb) {
        sum += x * y;
    }
    sum
}

/// Integer dot product of an int8 row with the quantised query (held as i16, the width the
/// products are taken at), sixteen independent lanes.
#[inline(always)]
pub(super) fn dot_i8(row: &[i8], query: &[i16]) -> i32 {
    let mut acc = [0i32; 16];
    let (ca, cb) = (row.chunks_exact(16), query.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += i32::from(x[i]) * i32::from(y[i]);
        }
    }
    let mut sum = acc.iter().sum::<i32>();
    for (x, y) in ra.iter().zip(rb) {
        sum += i32::from(*x) * i32::from(*y);
    }
    sum
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A deterministic stream of bytes (an LCG's top bits), as i8.
    pub(in crate::vector_table) fn bytes(seed: u64) -> impl FnMut() -> i8 {
        let mut x = seed;
        move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8 as i8
        }
    }

    /// The int8 dot product summed in order, one product at a time.
    pub(in crate::vector_table) fn naive_i8(row: &[i8], query: &[i16]) -> i32 {
        row.iter()
            .zip(query)
            .map(|(p, q)| i32::from(*p) * i32::from(*q))
            .sum()
    }

    #[test]
    fn int8_dot_product_equals_the_naive_sum() {
        let mut byte = bytes(3);
        // 384 (whole lanes) and 100 (a remainder of 4), extremes included; then lengths
        // around the lane width.
        for len in [384usize, 100, 0, 1, 15, 16, 17, 31, 33, 383, 385] {
            let mut a: Vec<i8> = (0..len).map(|_| byte()).collect();
            let b: Vec<i8> = (0..len).map(|_| byte()).collect();
            if let Some(first) = a.first_mut() {
                *first = -128;
            }
            let wide: Vec<i16> = b.iter().map(|&q| i16::from(q)).collect();
            assert_eq!(dot_i8(&a, &wide), naive_i8(&a, &wide), "length {len}");
        }
        // The extremes everywhere: the largest products of either sign.
        for (p, q) in [(-128i8, -128i16), (-128, 127), (127, 127), (0, -128)] {
            let a = vec![p; 385];
            let wide = vec![q; 385];
            assert_eq!(dot_i8(&a, &wide), 385 * i32::from(p) * i32::from(q));
        }
    }

    #[test]
    fn f32_dot_product_matches_the_naive_sum() {
        let mut byte = bytes(5);
        for len in [0usize, 1, 7, 8, 9, 384, 385] {
            let a: Vec<f32> = (0..len).map(|_| f32::from(byte()) / 128.0).collect();
            let b: Vec<f32> = (0..len).map(|_| f32::from(byte()) / 128.0).collect();
            let naive: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(x * y)).sum();
            assert!(
                (f64::from(dot(&a, &b)) - naive).abs() < 1e-4,
                "length {len}"
            );
        }
        assert_eq!(dot(&[0.0; 17], &[1.0; 17]), 0.0);
    }
}
