//! The AVX2 kernels (x86_64 only), each the same function as its portable reference in
//! [`super::scalar`], which the tests below hold it to.
//!
//! Everything here is compiled with `#[target_feature(enable = "avx2")]`, so it may only run
//! once `is_x86_feature_detected!("avx2")` said yes ([`VectorTable::scan_quantized`] checks
//! before calling in).

use std::arch::x86_64::*;
use std::collections::BinaryHeap;

use super::search::{Hit, RowFilter};
use super::VectorTable;

/// [`super::scalar::dot_i8`] with AVX2: 16 int8 values of the row widened to i16 and
/// multiplied with the query (already i16) by pairs into eight i32 lanes per instruction.
/// Compiled from the plain loop, the products widen to i32 and take the slower 32-bit
/// multiply (`benches/vectors.rs` shows the difference on a 100,000-row search).
///
/// Inlined into [`VectorTable::scan_quantized_avx2`] (same target feature), across the
/// module boundary.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn dot_i8_i16_avx2(row: &[i8], query: &[i16]) -> i32 {
    let n = row.len().min(query.len());
    let chunks = n / 16;
    let mut acc = _mm256_setzero_si256();
    for i in 0..chunks {
        // SAFETY: i * 16 + 16 <= n, and n is at most either slice's length: the 16 i8 and the
        // 16 i16 read are inside the slices, and `loadu` needs no alignment.
        let (r, q) = unsafe {
            (
                _mm_loadu_si128(row.as_ptr().add(i * 16).cast()),
                _mm256_loadu_si256(query.as_ptr().add(i * 16).cast()),
            )
        };
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_cvtepi8_epi16(r), q));
    }
    let s = _mm_add_epi32(
        _mm256_castsi256_si128(acc),
        _mm256_extracti128_si256::<1>(acc),
    );
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    let mut sum = _mm_cvtsi128_si32(s);
    for j in chunks * 16..n {
        sum += i32::from(row[j]) * i32::from(query[j]);
    }
    sum
}

impl VectorTable {
    /// [`VectorTable::scan_quantized_with`] compiled for AVX2, scoring rows with
    /// [`dot_i8_i16_avx2`].
    #[target_feature(enable = "avx2")]
    pub(super) fn scan_quantized_avx2(
        &self,
        rows: impl Iterator<Item = usize>,
        query: &[i16],
        query_scale: f32,
        filter: RowFilter<'_>,
        min: f32,
        n: usize,
    ) -> BinaryHeap<Hit> {
        let dot = |row: &[i8]| dot_i8_i16_avx2(row, query);
        self.scan_quantized_with(rows, dot, query_scale, filter, min, n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::scalar::dot_i8;
    use super::super::scalar::tests::{bytes, naive_i8};
    use super::*;
    use crate::event::MemoryType;
    use uuid::Uuid;

    fn has_avx2() -> bool {
        let found = std::arch::is_x86_feature_detected!("avx2");
        if !found {
            eprintln!("skipped: this CPU has no AVX2");
        }
        found
    }

    #[test]
    fn int8_dot_product_equals_the_scalar_one() {
        if !has_avx2() {
            return;
        }
        let mut byte = bytes(3);
        // Whole lanes (384), lengths around the lane width of 16 and remainders of every size.
        let lengths = [384usize, 100, 0, 1, 15, 16, 17, 31, 32, 33, 383, 385];
        for len in lengths.into_iter().chain(2..48) {
            let mut a: Vec<i8> = (0..len).map(|_| byte()).collect();
            let b: Vec<i8> = (0..len).map(|_| byte()).collect();
            if let Some(first) = a.first_mut() {
                *first = -128;
            }
            let wide: Vec<i16> = b.iter().map(|&q| i16::from(q)).collect();
            // SAFETY: AVX2 was detected above.
            let simd = unsafe { dot_i8_i16_avx2(&a, &wide) };
            assert_eq!(simd, dot_i8(&a, &wide), "length {len}");
            assert_eq!(simd, naive_i8(&a, &wide), "length {len}");
        }
        // Extremes in every lane (the largest products of either sign, summed by pairs in
        // `madd`), and zeros.
        for (p, q) in [
            (-128i8, -128i16),
            (-128, 127),
            (127, -128),
            (127, 127),
            (0, -128),
        ] {
            for len in [16usize, 33, 385] {
                let a = vec![p; len];
                let wide = vec![q; len];
                // SAFETY: AVX2 was detected above.
                let simd = unsafe { dot_i8_i16_avx2(&a, &wide) };
                assert_eq!(simd, dot_i8(&a, &wide), "{p} x {q}, length {len}");
            }
        }
        // A query longer than the row (or shorter) is read only as far as both go.
        let a: Vec<i8> = (0..40).map(|_| byte()).collect();
        let wide: Vec<i16> = (0..37).map(|_| i16::from(byte())).collect();
        // SAFETY: AVX2 was detected above.
        let simd = unsafe { dot_i8_i16_avx2(&a, &wide) };
        assert_eq!(simd, dot_i8(&a, &wide));
    }

    #[test]
    fn quantized_scan_equals_the_portable_one() {
        if !has_avx2() {
            return;
        }
        // 37 dimensions: two whole lanes and a remainder of 5.
        let mut byte = bytes(9);
        let mut row =
            |dim: usize| -> Vec<f32> { (0..dim).map(|_| f32::from(byte()) / 128.0).collect() };
        let mut t = VectorTable::default();
        for i in 0..500u128 {
            let ty = [MemoryType::Rule, MemoryType::Fact][i as usize % 2];
            let v = if i % 50 == 0 { vec![0.0; 37] } else { row(37) };
            assert!(t
                .upsert(Uuid::from_u128(i), &v, ty, (i % 10) as f32 / 10.0)
                .expect("upsert"));
        }
        let mut q = vec![0i8; 37];
        let q_scale = super::super::quantize::quantize(&row(37), &mut q);
        let wide: Vec<i16> = q.iter().map(|&v| i16::from(v)).collect();
        for (filter, min, n) in [
            (None, -1.0, 100),
            (Some(MemoryType::Fact), 0.0, 10),
            (None, 0.1, 500),
        ] {
            let portable = t
                .scan_quantized_with(0..500, |r| dot_i8(r, &wide), q_scale, filter.into(), min, n)
                .into_sorted_vec();
            // SAFETY: AVX2 was detected above.
            let simd =
                unsafe { t.scan_quantized_avx2(0..500, &wide, q_scale, filter.into(), min, n) }
                    .into_sorted_vec();
            assert!(!portable.is_empty());
            assert_eq!(simd, portable);
        }
    }
}
