//! Symmetric int8 quantisation of a row, for the first pass of a search: a quarter of the
//! bytes of the f32 row to stream.
//!
//! Invariant: `x ≈ q * scale` with `scale = max|x| / 127`, so every `q` is in `-127..=127`;
//! a row whose largest magnitude is zero or infinite quantises to zeros with scale 0 (it
//! scores 0 in the first pass).

/// Symmetric int8 quantisation of a row: `x ≈ q * scale`, `scale = max|x| / 127`.
#[inline]
pub(super) fn quantize(v: &[f32], out: &mut [i8]) -> f32 {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        out.fill(0);
        return 0.0;
    }
    let scale = max / 127.0;
    let inv = 127.0 / max;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer (|x * inv| <= 127)
    // without `round`, a libm call per value on the baseline target.
    const ROUND: f32 = 12_582_912.0;
    for (o, x) in out.iter_mut().zip(v) {
        *o = ((x * inv + ROUND) - ROUND) as i8;
    }
    scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_to_the_nearest_step_of_the_largest_one() {
        let mut q = [0i8; 5];
        let scale = quantize(&[1.0, -0.5, 0.25, -1.0, 0.0], &mut q);
        assert_eq!(scale, 1.0 / 127.0);
        assert_eq!(q, [127, -64, 32, -127, 0]);
        // Nothing to scale by: zeros, and a zero scale.
        let mut q = [1i8; 3];
        assert_eq!(quantize(&[0.0; 3], &mut q), 0.0);
        assert_eq!(q, [0; 3]);
        let mut q = [1i8; 2];
        assert_eq!(quantize(&[f32::INFINITY, 1.0], &mut q), 0.0);
        assert_eq!(q, [0; 2]);
    }
}
